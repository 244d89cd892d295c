//! Fuzz targets of the emulator's parsers of untrusted input (`fuzzkit`, on
//! stable Rust); seeds in `fuzz-corpus/<target>/`.
//!
//! - `wire`: TUN frames into `VnetHeader::parse`, `ip_destination` and
//!   `GsoChunk::new_checked`; a chunk accepted is segmented, and the
//!   segments must add up: as many as `wire_size` says with as many bytes,
//!   each at most headers + MSS, payloads that concatenate to the chunk's,
//!   IP lengths, IDs and TCP sequence numbers that follow, and checksums
//!   that verify once completed as the kernel would;
//! - `checksum`: `complete_checksum` on any frame writes two bytes at the
//!   checksum field or nothing;
//! - `trace`: the same text through the Mahimahi trace, LEO bandwidth, LEO
//!   delay and attenuation parsers; what they accept keeps their rules, an
//!   error names a line of the text;
//! - `config`: `LinkConfig::from_json`; a configuration accepted serialises
//!   to JSON that parses to the same configuration, and its derived numbers
//!   are computed when it names no file.
//!
//! `cargo test` runs each for half a second;
//! `SATBENCH_FUZZ_SECONDS=60 cargo test --release -p satlink --test fuzz`
//! for a minute each.

use fuzzkit::Config;
use satlink::capacity::{Trace, MAX_TRACE_MS};
use satlink::config::LinkConfig;
use satlink::fade::Attenuation;
use satlink::wire::{
    complete_checksum, fold, ip_destination, sum16, GsoChunk, VnetHeader, VNET_F_NEEDS_CSUM,
    VNET_HDR_LEN,
};

fn corpus(target: &str) -> String {
    format!("{}/fuzz-corpus/{target}", env!("CARGO_MANIFEST_DIR"))
}

/// The transport checksum of a segment is right (pseudo-header included).
fn l4_checksum_ok(p: &[u8], l4: usize, proto: u8) -> bool {
    let v6 = p[0] >> 4 == 6;
    let addrs = if v6 { &p[8..40] } else { &p[12..20] };
    let len = (p.len() - l4) as u32;
    fold(sum16(&p[l4..], sum16(addrs, 0) + proto as u32 + len)) == 0xffff
}

#[test]
fn fuzz_wire() {
    fuzzkit::run(
        Config::new("wire", corpus("wire"))
            .dict::<&[u8]>(&[
                b"\x01\x01",
                b"\x01\x04",
                b"\x01\x05",
                b"\x45",
                b"\x46",
                b"\x4f",
                b"\x60",
                b"\x06",
                b"\x11",
                b"\x00\x00",
                b"\xff\xff",
                b"\x05\xa8",
                b"\x00\x14",
                b"\x00\x10",
            ])
            .max_len(12_000),
        |b, f| {
            if let Some(h) = VnetHeader::parse(b) {
                let mut out = [0u8; VNET_HDR_LEN];
                h.emit(&mut out);
                assert_eq!(&out[..], &b[..VNET_HDR_LEN]);
                f.add(1 + h.gso_type as u64);
                if let Ok(dst) = ip_destination(&b[VNET_HDR_LEN..]) {
                    f.add(300 + dst.is_ipv6() as u64);
                }
            }
            let chunk = match GsoChunk::new_checked(b) {
                Ok(c) => c,
                Err(e) => {
                    f.add_bytes(400, format!("{:?}", std::mem::discriminant(&e)).as_bytes());
                    return;
                }
            };
            let h = VnetHeader::parse(b).expect("checked");
            let ip = &b[VNET_HDR_LEN..];
            let l4 = h.csum_start as usize;
            let proto = if h.gso_type & 0x7f == 5 { 17 } else { 6 };
            let hl = if proto == 6 {
                l4 + (ip[l4 + 12] >> 4) as usize * 4
            } else {
                l4 + 8
            };
            let mss = h.gso_size as usize;
            let (n, bytes) = chunk.wire_size();
            let mut segs = Vec::new();
            chunk.segment(|s| segs.push(s));
            f.add(500 + proto as u64);
            f.add_count(510, segs.len());
            assert_eq!(segs.len() as u32, n, "segments");
            assert_eq!(
                segs.iter().map(|s| s.len() - VNET_HDR_LEN).sum::<usize>() as u32,
                bytes,
                "bytes"
            );
            let mut payload = Vec::new();
            for (i, s) in segs.iter_mut().enumerate() {
                let p = &s[VNET_HDR_LEN..];
                assert!(
                    p.len() <= hl + mss,
                    "segment {i}: {} > {hl} + {mss}",
                    p.len()
                );
                payload.extend_from_slice(&p[hl..]);
                if p[0] >> 4 == 4 {
                    assert_eq!(u16::from_be_bytes([p[2], p[3]]) as usize, p.len());
                    let ihl = (p[0] & 0x0f) as usize * 4;
                    assert_eq!(
                        fold(sum16(&p[..ihl], 0)),
                        0xffff,
                        "segment {i}: IPv4 checksum"
                    );
                    let id0 = u16::from_be_bytes([ip[4], ip[5]]);
                    assert_eq!(u16::from_be_bytes([p[4], p[5]]), id0.wrapping_add(i as u16));
                } else {
                    assert_eq!(u16::from_be_bytes([p[4], p[5]]) as usize, p.len() - 40);
                }
                if proto == 6 {
                    let seq = |x: &[u8]| u32::from_be_bytes(x[l4 + 4..l4 + 8].try_into().unwrap());
                    assert_eq!(
                        seq(p),
                        seq(ip).wrapping_add((i * mss) as u32),
                        "segment {i}"
                    );
                } else {
                    assert_eq!(
                        u16::from_be_bytes([p[l4 + 4], p[l4 + 5]]) as usize,
                        p.len() - l4
                    );
                }
                let sh = VnetHeader::parse(s).unwrap();
                assert!(sh.flags & VNET_F_NEEDS_CSUM != 0 && !sh.is_gso());
                assert_eq!(complete_checksum(s), Ok(true));
                assert!(
                    l4_checksum_ok(&s[VNET_HDR_LEN..], l4, proto),
                    "segment {i}: transport checksum"
                );
            }
            assert_eq!(payload, &ip[hl..], "payloads");
        },
    );
}

#[test]
fn fuzz_checksum() {
    fuzzkit::run(
        Config::new("checksum", corpus("checksum"))
            .dict::<&[u8]>(&[b"\x01", b"\x00", b"\xff\xff", b"\x14\x00", b"\x10\x00"])
            .max_len(2048),
        |b, f| {
            let mut frame = b.to_vec();
            let r = complete_checksum(&mut frame);
            match r {
                Ok(true) => {
                    f.add(1);
                    let h = VnetHeader::parse(b).unwrap();
                    let at = VNET_HDR_LEN + h.csum_start as usize + h.csum_offset as usize;
                    for (i, (x, y)) in b.iter().zip(&frame).enumerate() {
                        assert!(x == y || i == at || i == at + 1, "byte {i} changed");
                    }
                }
                Ok(false) | Err(_) => {
                    f.add(2 + r.is_err() as u64);
                    assert_eq!(frame, b, "changed although {r:?}");
                }
            }
        },
    );
}

/// The 1-based line an error names is one of the text's (0: the whole text).
fn line_ok(line: usize, text: &str) -> bool {
    line <= text.lines().count().max(1)
}

#[test]
fn fuzz_trace() {
    fuzzkit::run(
        Config::new("trace", corpus("trace"))
            .dict(&[
                "\n",
                "\r\n",
                "0",
                "1",
                "9",
                "-",
                ".",
                "e",
                "1e308",
                "inf",
                "NaN",
                "#",
                " ",
                "1000000000",
                "1000000001",
                "18446744073709551616",
                "3600000",
                "100.5",
            ])
            .max_len(4096),
        |b, f| {
            let text = String::from_utf8_lossy(b);
            match Trace::parse(&text) {
                Ok(t) => {
                    f.add(1);
                    let o = t.opportunities();
                    assert!(!o.is_empty());
                    assert!(o.windows(2).all(|w| w[0] <= w[1]), "{o:?}");
                    assert!(*o.last().unwrap() > 0 && *o.last().unwrap() <= MAX_TRACE_MS);
                    f.add_count(2, o.len());
                }
                Err(e) => {
                    f.add(3);
                    assert!(line_ok(e.line, &text), "line {} of {text:?}", e.line);
                }
            }
            match satlink::leo::parse_bandwidth(&text) {
                Ok(v) => {
                    f.add(10);
                    assert!(v.windows(2).all(|w| w[0] <= w[1]), "{v:?}");
                    assert!(v.iter().all(|&x| x <= MAX_TRACE_MS));
                }
                Err(e) => {
                    f.add(11);
                    assert!(line_ok(e.line, &text), "line {} of {text:?}", e.line);
                }
            }
            match satlink::leo::parse_delays(&text) {
                Ok(v) => {
                    f.add(20);
                    assert!(v
                        .iter()
                        .all(|x| x.is_finite() && (0.0..=satlink::leo::MAX_DELAY_MS).contains(x)));
                }
                Err(e) => {
                    f.add(21);
                    assert!(line_ok(e.line, &text), "line {} of {text:?}", e.line);
                }
            }
            match Attenuation::parse(&text) {
                Ok(points) => {
                    f.add(30);
                    for looped in [false, true] {
                        if let Ok(a) = Attenuation::new(&points, looped) {
                            f.add(31 + looped as u64);
                            let _ = a;
                        }
                    }
                }
                Err(e) => {
                    f.add(34);
                    assert!(line_ok(e.line, &text), "line {} of {text:?}", e.line);
                }
            }
        },
    );
}

/// Does any `path` in the configuration name a file?
fn names_a_file(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .any(|(k, x)| (k == "path" && !x.is_null()) || names_a_file(x)),
        serde_json::Value::Array(a) => a.iter().any(names_a_file),
        _ => false,
    }
}

#[test]
fn fuzz_config() {
    fuzzkit::run(
        Config::new("config", corpus("config"))
            .dict(&[
                "{",
                "}",
                "[",
                "]",
                ",",
                ":",
                "\"",
                "null",
                "true",
                "false",
                "0",
                "-1",
                "1e400",
                "1e-9",
                "\"kind\"",
                "\"constant\"",
                "\"schedule\"",
                "\"trace\"",
                "\"leo_trace\"",
                "\"bernoulli\"",
                "\"gilbert_elliott\"",
                "\"ber\"",
                "\"ms\"",
                "\"packets\"",
                "\"bytes\"",
                "\"codel\"",
                "\"acm\"",
                "\"ccm\"",
                "\"dama\"",
                "\"terminals\"",
                "\"subnets\"",
                "\"forward\"",
                "\"return\"",
                "\"rate\"",
                "\"delay\"",
                "\"loss\"",
                "\"queue\"",
                "\"limit\"",
                "\"points\"",
                "\"fade\"",
                "\"reconfiguration\"",
                "\"seed\"",
            ])
            .max_len(4096),
        |b, f| {
            let Ok(text) = std::str::from_utf8(b) else {
                return;
            };
            match LinkConfig::from_json(text) {
                Ok(c) => {
                    f.add(1);
                    let v = serde_json::to_value(&c).unwrap();
                    let s = v.to_string();
                    let again = LinkConfig::from_json(&s)
                        .unwrap_or_else(|e| panic!("{s}: its own serialisation refused: {e:?}"));
                    assert_eq!(
                        serde_json::to_value(&again).unwrap(),
                        v,
                        "not the same after a round trip"
                    );
                    for (k, x) in v.as_object().unwrap() {
                        f.add_bytes(2, format!("{k}{}", x.is_null()).as_bytes());
                    }
                    if !names_a_file(&v) {
                        match c.derived() {
                            Ok(d) => {
                                f.add(3);
                                assert!(d.base_rtt_ms.is_finite() && d.base_rtt_ms >= 0.0);
                                for dir in [&d.forward, &d.ret] {
                                    assert!((0.0..=1.0).contains(&dir.packet_loss_1500));
                                    assert!(dir.min_delay_ms <= dir.max_delay_ms);
                                }
                            }
                            Err(e) => f.add_bytes(4, e.field.as_bytes()),
                        }
                    }
                }
                Err(e) => {
                    f.add_bytes(5, e.field.as_bytes());
                    assert!(!e.field.is_empty() && !e.message.is_empty(), "{e:?}");
                }
            }
        },
    );
}

/// Found by the `config` target: serde_json without `float_roundtrip`
/// parsed 1e-60 as 1.0000000000000001e-60, so a configuration was not the
/// numbers written (nor its own serialisation read back).
#[test]
fn config_floats_are_read_exactly() {
    let c = LinkConfig::from_json(
        r#"{"forward": {"loss": [{"kind": "ber", "ber": 1e-60}]}, "return": {}}"#,
    )
    .unwrap();
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["forward"]["loss"][0]["ber"].as_f64(), Some(1e-60));
    let again = LinkConfig::from_json(&v.to_string()).unwrap();
    assert_eq!(serde_json::to_value(&again).unwrap(), v);
}
