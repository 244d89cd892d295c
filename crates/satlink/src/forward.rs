//! The forward carrier (DVB-S2): BBFRAMEs back to back at one symbol rate,
//! each for one terminal and in that terminal's MODCOD.
//!
//! When the carrier is free and some terminal has a packet, a frame starts:
//! for the next terminal in round-robin order among those with packets
//! queued by then. Its MODCOD is the terminal's [`Adaptation`]'s at the
//! frame's start; it carries the MODCOD's data field (`Kbch / 8 - 10`
//! bytes) after a 10-byte BBHEADER and is on the air for its physical-layer
//! frame's symbols at the symbol rate. It is lost if the terminal's C/N at
//! its start is below the MODCOD's required Es/N0. A frame the terminal's
//! packets do not fill is padded (no short frames, no frames shared by
//! terminals of the same MODCOD).

use crate::acm::Adaptation;
use crate::fade::Channel;
use crate::framed::{Backlog, Carrier, Frame};
use crate::modcod::{BBHEADER_BYTES, MODCODS};
use crate::series::{sample_times, INTERVAL_MS, MAX_POINTS};
use crate::stats::{ForwardTerminal, TerminalDetail};
use crate::time::Instant;

/// One terminal as the forward carrier sees it.
pub struct ForwardTerminalState {
    pub channel: Channel,
    pub adaptation: Box<dyn Adaptation>,
}

/// The forward carrier: symbol rate, pilots, and the terminals it serves.
pub struct ForwardCarrier {
    kind: &'static str,
    symbol_rate: f64,
    pilots: bool,
    terminals: Vec<ForwardTerminalState>,
    free_at: Instant,
    next_rr: usize,
}

impl ForwardCarrier {
    /// `kind`: "acm" or "ccm", for reports.
    pub fn new(
        kind: &'static str,
        symbol_rate: f64,
        pilots: bool,
        terminals: Vec<ForwardTerminalState>,
    ) -> ForwardCarrier {
        ForwardCarrier {
            kind,
            symbol_rate,
            pilots,
            terminals,
            free_at: Instant::ZERO,
            next_rr: 0,
        }
    }
}

impl Carrier for ForwardCarrier {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn terminals(&self) -> usize {
        self.terminals.len()
    }

    fn next_frame(
        &mut self,
        now: Instant,
        backlog: &dyn Backlog,
    ) -> Result<Frame, Option<Instant>> {
        let n = self.terminals.len();
        let earliest = (0..n).filter_map(|i| backlog.ready_at(i)).min();
        let Some(earliest) = earliest else {
            return Err(None);
        };
        let start = earliest.max(self.free_at);
        if start > now {
            return Err(Some(start));
        }
        let i = (0..n)
            .map(|k| (self.next_rr + k) % n)
            .find(|&i| backlog.ready_at(i).is_some_and(|r| r <= start))
            .expect("the earliest terminal is ready");
        self.next_rr = (i + 1) % n;
        let t = &mut self.terminals[i];
        let m = &MODCODS[t.adaptation.modcod_at(start, &t.channel)];
        let end = start + m.frame_duration(self.symbol_rate, self.pilots);
        self.free_at = end;
        Ok(Frame {
            terminal: i,
            start,
            end,
            payload: m.data_field_bytes(),
            header: BBHEADER_BYTES,
            lost: t.channel.cn_db(start) < m.es_n0_db,
        })
    }

    fn ends_in_order(&self) -> bool {
        true
    }

    fn settle(&mut self, now: Instant) {
        for t in self.terminals.iter_mut() {
            t.adaptation.modcod_at(now, &t.channel);
        }
    }

    fn report(&self, until: Instant) -> (Vec<TerminalDetail>, u64) {
        let (times, step) = sample_times(until, INTERVAL_MS * 1_000_000, MAX_POINTS);
        let mut interval = step;
        let details = self
            .terminals
            .iter()
            .map(|t| {
                let s = t.adaptation.series();
                interval = interval.max(s.interval_ns());
                let modcod_series: Vec<(f64, &'static str)> = s
                    .points_s()
                    .into_iter()
                    .map(|(ts, m)| (ts, MODCODS[m as usize].name))
                    .collect();
                TerminalDetail::Forward(ForwardTerminal {
                    modcod: modcod_series.last().map_or("", |p| p.1),
                    modcod_changes: t.adaptation.changes(),
                    modcod_series,
                    cn_db_series: times
                        .iter()
                        .map(|&ts| (ts.as_secs_f64(), t.channel.cn_db(ts)))
                        .collect(),
                })
            })
            .collect();
        (details, interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acm::{Acm, Ccm, ModcodRule};
    use crate::delay::{Delay, RoundTrip};
    use crate::encap::{Gse, Raw};
    use crate::fade::Attenuation;
    use crate::framed::Framed;
    use crate::link::Direction;
    use crate::modcod::by_name;
    use crate::queue::{DropTail, Limit, Queue};
    use crate::rng::Rng;
    use crate::stats::TerminalDetail;
    use crate::testutil::run;
    use std::time::Duration;

    fn ccm(name: &str, fade: Attenuation) -> ForwardTerminalState {
        ForwardTerminalState {
            channel: Channel::new(20.0, fade),
            adaptation: Box::new(Ccm::new(by_name(name).unwrap())),
        }
    }

    fn direction(
        carrier: ForwardCarrier,
        encap: Box<dyn crate::encap::Encapsulation>,
        delay_ms: u64,
    ) -> Direction<u32> {
        let n = carrier.terminals();
        let queues: Vec<Box<dyn Queue<u32>>> = (0..n)
            .map(|_| Box::new(DropTail::new(Limit::Unlimited)) as Box<dyn Queue<u32>>)
            .collect();
        let stage = Framed::new(queues, Box::new(carrier), encap);
        Direction::with_stage(
            Box::new(stage),
            vec![],
            Delay::constant(Duration::from_millis(delay_ms)),
            false,
            Rng::new(1),
        )
    }

    #[test]
    fn one_packet_waits_for_its_bbframe() {
        // QPSK 1/2 at 1 Mbaud: 32,490 symbols = 32.49 ms per frame, 4016 bytes.
        let c = ForwardCarrier::new(
            "ccm",
            1e6,
            false,
            vec![ccm("QPSK 1/2", Attenuation::clear())],
        );
        let mut d = direction(c, Box::new(Gse::new(6)), 100);
        let out = run(&mut d, &[(Instant::from_millis(5), 0, 1, 100)]);
        assert_eq!(
            out,
            vec![(Instant::from_micros(5_000 + 32_490 + 100_000), 1)]
        );
        let r = d.report();
        let a = r.access.unwrap();
        assert_eq!((a.frames, a.frames_lost), (1, 0));
        let e = &a.encapsulation;
        assert_eq!((e.packets, e.ip_bytes, e.overhead_bytes), (1, 100, 10));
        assert_eq!((e.frame_header_bytes, e.padding_bytes), (10, 4016 - 110));
    }

    #[test]
    fn saturated_rate_is_the_modcods_rate_less_encapsulation() {
        // 1500-byte packets, GSE with a 6-byte label, QPSK 1/2 at 1 Mbaud.
        let c = ForwardCarrier::new(
            "ccm",
            1e6,
            false,
            vec![ccm("QPSK 1/2", Attenuation::clear())],
        );
        let mut d = direction(c, Box::new(Gse::new(6)), 0);
        let arr: Vec<_> = (0..1000u32).map(|i| (Instant::ZERO, 0, i, 1500)).collect();
        let out = run(&mut d, &arr);
        assert_eq!(out.len(), 1000);
        let t = out.last().unwrap().0.as_secs_f64();
        let ip_bps = 1000.0 * 1500.0 * 8.0 / t;
        // Frame rate 4016 bytes / 32.49 ms; encapsulation efficiency for
        // 1500-byte packets in 4016-byte data fields.
        let eff = crate::encap::efficiency(&Gse::new(6), 1500, 4016);
        let expect = 4016.0 * 8.0 / 0.03249 * eff;
        assert!(
            (ip_bps - expect).abs() / expect < 0.003,
            "{ip_bps} vs {expect}"
        );
        let a = d.report().access.unwrap();
        assert!(a.encapsulation.fragmented > 0);
        assert_eq!(a.encapsulation.frame_header_bytes, 10 * a.frames);
    }

    #[test]
    fn round_robin_across_terminals() {
        let c = ForwardCarrier::new(
            "ccm",
            1e6,
            false,
            vec![
                ccm("QPSK 1/2", Attenuation::clear()),
                ccm("8PSK 3/4", Attenuation::clear()),
            ],
        );
        let mut d = direction(c, Box::new(Raw), 0);
        // Each terminal has 3 frames' worth; frames alternate 0, 1, 0, 1, ...
        let mut arr = Vec::new();
        for k in 0..3u32 {
            arr.push((Instant::ZERO, 0, k, 4016));
            arr.push((Instant::ZERO, 1, 100 + k, 6041));
        }
        let out = run(&mut d, &arr);
        let ids: Vec<u32> = out.iter().map(|o| o.1).collect();
        assert_eq!(ids, vec![0, 100, 1, 101, 2, 102]);
        // 8PSK frames: 21,600 + 90 symbols.
        let q = 32_490u64;
        let p = 21_690u64;
        let times: Vec<u64> = out.iter().map(|o| o.0.as_nanos() / 1000).collect();
        assert_eq!(
            times,
            vec![
                q,
                q + p,
                2 * q + p,
                2 * q + 2 * p,
                3 * q + 2 * p,
                3 * q + 3 * p
            ]
        );
    }

    #[test]
    fn ccm_deep_fade_is_an_outage() {
        // QPSK 3/4 needs 4.03 dB; clear sky 20 dB; 18 dB of rain from 0.95 s to 1.95 s.
        let pts = [
            (0.0, 0.0),
            (0.95, 0.0),
            (0.950001, 18.0),
            (1.95, 18.0),
            (1.950001, 0.0),
        ];
        let fade = Attenuation::new(&pts, false).unwrap();
        let c = ForwardCarrier::new("ccm", 1e6, false, vec![ccm("QPSK 3/4", fade)]);
        let mut d = direction(c, Box::new(Raw), 0);
        // One packet every 100 ms for 3 s.
        let arr: Vec<_> = (0..30u32)
            .map(|i| (Instant::from_millis(100 * i as u64), 0, i, 500))
            .collect();
        let out = run(&mut d, &arr);
        let r = d.report();
        // Packets sent from 1.0 s to 1.9 s (frames starting in the fade) are lost.
        assert_eq!(r.dropped.loss.packets, 10);
        assert_eq!(out.len(), 20);
        assert!(out.iter().all(|o| !(10..20).contains(&o.1)));
        let a = r.access.unwrap();
        assert_eq!((a.frames_lost, a.packets_lost), (10, 10));
    }

    #[test]
    fn acm_rate_steps_after_the_loop_delay_and_a_fast_fade_loses_frames() {
        // Clear sky 20 dB; at 2.2 s the attenuation jumps to 10 dB (C/N 10 dB).
        // Reports every 1 s, round trip 500 ms: the report at 3 s switches to
        // 16APSK 2/3 (8.97 dB) from 3.5 s; until then frames of 32APSK 9/10 are lost.
        let fade = Attenuation::new(&[(0.0, 0.0), (2.2, 0.0), (2.200001, 10.0)], false).unwrap();
        let ch = Channel::new(20.0, fade);
        let rule = ModcodRule::new((0..MODCODS.len()).collect(), 0.0, 0.0);
        let acm = Acm::new(
            rule,
            Duration::from_secs(1),
            RoundTrip::constant(Duration::from_millis(500)),
            &ch,
        );
        let t = ForwardTerminalState {
            channel: ch,
            adaptation: Box::new(acm),
        };
        let c = ForwardCarrier::new("acm", 1e6, false, vec![t]);
        let mut d = direction(c, Box::new(Raw), 0);
        // Saturate: a frame-sized packet every 5 ms, more than the carrier carries.
        let arr: Vec<_> = (0..1000u32)
            .map(|i| (Instant::from_millis(5 * i as u64), 0, i, 2000))
            .collect();
        run(&mut d, &arr);
        let a = d.report().access.unwrap();
        let TerminalDetail::Forward(f) = &a.terminals[0].detail else {
            panic!()
        };
        let names: Vec<(f64, &str)> = f.modcod_series.clone();
        assert_eq!(names, vec![(0.0, "32APSK 9/10"), (3.5, "16APSK 2/3")]);
        // Frames starting from 2.2 s to 3.5 s were lost: 1.3 s of 32APSK
        // frames of 13,050 symbols (13.05 ms) each: 99 or 100 frames.
        assert!(
            (99..=101).contains(&a.frames_lost),
            "{} lost",
            a.frames_lost
        );
        // The C/N series: every 100 ms, 20 dB until 2.2 s, 10 dB after.
        assert_eq!(f.cn_db_series[22], (2.2, 20.0));
        assert_eq!(f.cn_db_series[23].1, 10.0);
    }

    #[test]
    fn acm_rate_steps_through_the_thresholds() {
        // C/N rises 1 dB a second from 10 dB to 20 dB (rain clearing);
        // reports every second, a 500 ms round trip, no margin or hysteresis:
        // each report's MODCOD (the most efficient one whose threshold the
        // C/N clears) is in use 500 ms later, and no frame is lost.
        let fade = Attenuation::new(&[(0.0, 10.0), (10.0, 0.0)], false).unwrap();
        let ch = Channel::new(20.0, fade);
        let rule = ModcodRule::new((0..MODCODS.len()).collect(), 0.0, 0.0);
        let rtt = RoundTrip::constant(Duration::from_millis(500));
        let acm = Acm::new(rule, Duration::from_secs(1), rtt, &ch);
        let t = ForwardTerminalState {
            channel: ch,
            adaptation: Box::new(acm),
        };
        let c = ForwardCarrier::new("acm", 1e6, false, vec![t]);
        let mut d = direction(c, Box::new(Raw), 0);
        // Saturated: 1000-byte packets at 8 Mbit/s for 13 s.
        let arr: Vec<_> = (0..13_000u32)
            .map(|i| (Instant::from_millis(i as u64), 0, i, 1000))
            .collect();
        let out = run(&mut d, &arr);
        let a = d.report_at(Instant::from_secs_f64(13.0)).access.unwrap();
        let TerminalDetail::Forward(f) = &a.terminals[0].detail else {
            panic!()
        };
        let expect = [
            (0.0, "16APSK 2/3"),  // 10 dB: 8.97 dB (beats 8PSK 5/6)
            (1.5, "16APSK 3/4"),  // 11 dB: 10.21 (beats 8PSK 9/10)
            (2.5, "16APSK 5/6"),  // 12 dB: 11.61
            (3.5, "32APSK 3/4"),  // 13 dB: 12.73 (beats 16APSK 8/9)
            (4.5, "32APSK 4/5"),  // 14 dB: 13.64
            (5.5, "32APSK 5/6"),  // 15 dB: 14.28
            (6.5, "32APSK 8/9"),  // 16 dB: 15.69
            (7.5, "32APSK 9/10"), // 17 dB on: 16.05
        ];
        assert_eq!(f.modcod_series, expect.to_vec());
        assert_eq!(a.frames_lost, 0);
        // The delivered rate is the MODCOD's: bytes delivered in a window
        // against symbol rate x efficiency (a frame and a packet of slack:
        // packets leave in bursts, at the ends of frames).
        let rate = |from: f64, to: f64| {
            let n = out
                .iter()
                .filter(|o| (from..to).contains(&o.0.as_secs_f64()))
                .count();
            n as f64 * 8000.0 / (to - from)
        };
        for (from, to, m) in [(0.2, 1.4, "16APSK 2/3"), (8.0, 12.0, "32APSK 9/10")] {
            let mc = &MODCODS[by_name(m).unwrap()];
            let want = mc.bps(1e6, false);
            let got = rate(from, to);
            let slack = (mc.data_field_bytes() + 1000) as f64 * 8.0 / (to - from);
            assert!((got - want).abs() < slack, "{m}: {got} vs {want}");
        }
    }
}
