//! Per-leg TCP settings and which leg faces the satellite.
//!
//! A leg's settings are written `KEY=VALUE,...` (`cc=bbr,sndbuf=8M,nodelay`):
//!
//! | key        | socket option                                   | value                         |
//! |------------|-------------------------------------------------|-------------------------------|
//! | `cc`       | `TCP_CONGESTION`                                | a name the kernel knows: `cubic`, `bbr`, `reno`, ... |
//! | `sndbuf`   | `SO_SNDBUFFORCE` (`SO_SNDBUF` without CAP_NET_ADMIN) | bytes, `K`/`M`/`G` (binary), 4K..1G |
//! | `rcvbuf`   | `SO_RCVBUFFORCE` (`SO_RCVBUF`)                  | as `sndbuf`                   |
//! | `nodelay`  | `TCP_NODELAY`                                   | `on`/`off` (`nodelay` alone: on) |
//! | `fastopen` | accepting leg: `TCP_FASTOPEN` (queue of 1024); outgoing leg: `TCP_FASTOPEN_CONNECT` | `on`/`off` |
//! | `maxseg`   | `TCP_MAXSEG`                                    | bytes, 88..32767              |
//!
//! A key left out keeps the kernel's default (for the buffers: autotuning,
//! which a fixed size turns off). The initial congestion window is no socket
//! option: it is the route's `initcwnd` (and `initrwnd`), set by the testbed;
//! the PEP reports each leg's initial window in its log.
//!
//! At the terminal the outgoing leg faces the satellite; at the gateway the
//! incoming one does ([`Placement::satellite_leg`]).

use crate::relay::Leg;
use serde::Serialize;

/// Where the PEP sits.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// At the satellite terminal: clients behind it, the satellite ahead.
    Terminal,
    /// At the gateway: the satellite behind it, the servers ahead.
    Gateway,
}

/// What a leg faces.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Face {
    Satellite,
    Terrestrial,
}

impl Placement {
    pub fn parse(s: &str) -> Option<Placement> {
        match s {
            "terminal" => Some(Placement::Terminal),
            "gateway" => Some(Placement::Gateway),
            _ => None,
        }
    }

    /// The leg that crosses the satellite link.
    pub fn satellite_leg(self) -> Leg {
        match self {
            Placement::Terminal => Leg::Out,
            Placement::Gateway => Leg::In,
        }
    }

    pub fn face(self, leg: Leg) -> Face {
        if leg == self.satellite_leg() {
            Face::Satellite
        } else {
            Face::Terrestrial
        }
    }
}

/// One leg's requested settings; `None` keeps the kernel's default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LegSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cc: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sndbuf: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rcvbuf: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodelay: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fastopen: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maxseg: Option<u16>,
}

/// A setting that cannot be used: the key and what is wrong.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct SettingError {
    pub key: String,
    pub message: String,
}

fn bad(key: &str, message: impl Into<String>) -> SettingError {
    SettingError {
        key: key.to_string(),
        message: message.into(),
    }
}

/// `123`, `64K`, `8M`, `1G` (binary multiples).
pub fn parse_size(s: &str) -> Option<u64> {
    let (digits, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

fn parse_bool(key: &str, v: Option<&str>) -> Result<bool, SettingError> {
    match v {
        None | Some("on" | "1" | "true" | "yes") => Ok(true),
        Some("off" | "0" | "false" | "no") => Ok(false),
        Some(other) => Err(bad(key, format!("expects on or off, got {other:?}"))),
    }
}

fn parse_buf(key: &str, v: Option<&str>) -> Result<u32, SettingError> {
    const MIN: u64 = 4 << 10;
    const MAX: u64 = 1 << 30;
    let v = v.ok_or_else(|| bad(key, "needs a size (bytes, K, M or G)"))?;
    match parse_size(v) {
        Some(n) if (MIN..=MAX).contains(&n) => Ok(n as u32),
        Some(_) => Err(bad(key, format!("{v} is outside 4K..1G"))),
        None => Err(bad(
            key,
            format!("expects a size (bytes, K, M or G), got {v:?}"),
        )),
    }
}

impl LegSettings {
    /// Parse `KEY=VALUE,...`; an empty string is all defaults.
    pub fn parse(s: &str) -> Result<LegSettings, SettingError> {
        let mut l = LegSettings::default();
        for item in s.split(',').filter(|i| !i.is_empty()) {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (item, None),
            };
            match key {
                "cc" => {
                    let v = value.ok_or_else(|| bad(key, "needs a name (cubic, bbr, reno)"))?;
                    let ok = !v.is_empty()
                        && v.len() < 16
                        && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                    if !ok {
                        return Err(bad(key, format!("{v:?} is no congestion control name")));
                    }
                    l.cc = Some(v.to_string());
                }
                "sndbuf" => l.sndbuf = Some(parse_buf(key, value)?),
                "rcvbuf" => l.rcvbuf = Some(parse_buf(key, value)?),
                "nodelay" => l.nodelay = Some(parse_bool(key, value)?),
                "fastopen" => l.fastopen = Some(parse_bool(key, value)?),
                "maxseg" => {
                    let v = value.ok_or_else(|| bad(key, "needs a size in bytes (88..32767)"))?;
                    match v.parse::<u16>() {
                        Ok(n) if (88..=32767).contains(&n) => l.maxseg = Some(n),
                        _ => return Err(bad(key, format!("expects 88..32767, got {v:?}"))),
                    }
                }
                other => {
                    return Err(bad(
                        other,
                        "unknown key (cc, sndbuf, rcvbuf, nodelay, fastopen, maxseg)",
                    ))
                }
            }
        }
        Ok(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_form() {
        let l =
            LegSettings::parse("cc=bbr,sndbuf=8M,rcvbuf=65536,nodelay,fastopen=off,maxseg=1360")
                .unwrap();
        assert_eq!(
            l,
            LegSettings {
                cc: Some("bbr".into()),
                sndbuf: Some(8 << 20),
                rcvbuf: Some(65536),
                nodelay: Some(true),
                fastopen: Some(false),
                maxseg: Some(1360),
            }
        );
        assert_eq!(LegSettings::parse("").unwrap(), LegSettings::default());
        assert_eq!(
            serde_json::to_string(&l).unwrap(),
            r#"{"cc":"bbr","sndbuf":8388608,"rcvbuf":65536,"nodelay":true,"fastopen":false,"maxseg":1360}"#
        );
    }

    #[test]
    fn each_bad_key_is_named() {
        let err = |s| LegSettings::parse(s).unwrap_err().to_string();
        assert_eq!(err("cc"), "cc: needs a name (cubic, bbr, reno)");
        assert_eq!(err("cc=b-b"), "cc: \"b-b\" is no congestion control name");
        assert_eq!(
            err("sndbuf=1k2"),
            "sndbuf: expects a size (bytes, K, M or G), got \"1k2\""
        );
        assert_eq!(err("rcvbuf=2G"), "rcvbuf: 2G is outside 4K..1G");
        assert_eq!(err("rcvbuf"), "rcvbuf: needs a size (bytes, K, M or G)");
        assert_eq!(
            err("nodelay=maybe"),
            "nodelay: expects on or off, got \"maybe\""
        );
        assert_eq!(err("fastopen=2"), "fastopen: expects on or off, got \"2\"");
        assert_eq!(err("maxseg=40"), "maxseg: expects 88..32767, got \"40\"");
        assert_eq!(
            err("cwnd=10"),
            "cwnd: unknown key (cc, sndbuf, rcvbuf, nodelay, fastopen, maxseg)"
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
    }

    #[test]
    fn placement_decides_the_satellite_leg() {
        assert_eq!(Placement::Terminal.satellite_leg(), Leg::Out);
        assert_eq!(Placement::Gateway.satellite_leg(), Leg::In);
        assert_eq!(Placement::Terminal.face(Leg::In), Face::Terrestrial);
        assert_eq!(Placement::Gateway.face(Leg::In), Face::Satellite);
        assert_eq!(Placement::parse("satellite"), None);
    }
}
