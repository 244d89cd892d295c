//! Link profiles: the TOML a user writes, read, checked and resolved here.
//!
//! A profile has a `name`, a `description` and two tables, `[forward]`
//! (gateway to terminal, the downlink) and `[return]` (terminal to
//! gateway). Each direction takes these keys (all optional; an empty
//! direction is an ideal wire); the ranges are [`crate::config`]'s:
//!
//! ```text
//! rate_mbps = 10                         constant capacity, 0.001 to 1,000,000 Mbit/s
//! rate_schedule = [[0, 100], [12, 80]]   (seconds, Mbit/s; 0 = outage); rate_period_s repeats it
//! trace = "file.trace"                   Mahimahi trace, relative to the profile
//! delay_ms = 265                         one-way propagation delay, 0 to 3,600,000 ms
//! delay_schedule = [[0, 20], [12, 35]]   (seconds, ms); delay_period_s repeats it
//! jitter_ms = 2, jitter = "uniform"|"normal", reorder = false    (jitter 0 to 60,000 ms)
//! queue_packets | queue_bytes | queue_ms  drop-tail limit (ms at the link rate)
//! aqm = "droptail"|"codel"|"fq_codel", codel_target_ms = 5, codel_interval_ms = 100
//! fq_flows = 1024, fq_quantum = 1514     FQ-CoDel's flow queues and DRR quantum (bytes); not with an access
//! ecn = true                             CoDel marks ECN-capable packets CE instead of dropping them
//! ce_threshold_ms = 1, ce_threshold_selector = "ect1"|"all"   also mark every capable (or ECT(1),
//!                                        L4S-style) packet that waited longer than this
//! loss = 0.01                            Bernoulli packet loss, 0 to 1
//! ber = 1e-6                             bit error rate (per-packet loss from size), 0 to 1
//! gilbert = { p = 0.01, r = 0.3, loss_good = 0, loss_bad = 1 }
//! loss_schedule = [[0, 0], [12, 0.2], [12.3, 0]]; loss_period_s repeats it
//! leo_trace = "bw.txt", leo_unit_mbps = 12   recorded LEO rate: k lines in a ms give k x unit
//!                                            in that ms (repeating); relative to the profile
//! delay_trace = "delay.txt", delay_trace_interval_ms = 10   one-way delay per interval, repeating
//! reconfiguration = { period_s = 15, offset_s = 12, delay_ms = 40, delay_duration_ms = 300,
//!                     loss_p = 1, loss_duration_ms = 50, outage = false }   a periodic event
//! [forward.access]   DVB-S2 link adaptation (kind = "acm" or "ccm", ...; [`crate::config::access`])
//! [return.access]    DVB-RCS2 bandwidth on demand (kind = "dama", ...)
//! ```
//!
//! Schedule times run from 0 to 1,000,000 s, strictly increasing. Top level:
//! `align_minute = true` makes schedule time 0 the start of the current UTC
//! minute. Terminals (top level, optional), one table per satellite terminal:
//!
//! ```text
//! [[terminals]]
//! forward = { clear_sky_cn_db = 14, fade = "fades/moderate-rain.txt", fade_loop = false }
//! return = { cra_mbps = 2, rbdc_max_mbps = 0, vbdc_max_bytes = 0, fca_max_mbps = 0 }
//! ```
//!
//! Overrides (`--set`): `forward.KEY=VALUE`, `return.KEY=VALUE`, or
//! `KEY=VALUE` for both directions; a value replaces any key it conflicts
//! with.
//!
//! [`parse`] checks a profile's form (known keys, types, one of each group)
//! and remembers where each key was given; [`Profile::config`] turns it into
//! the emulator's configuration ([`crate::config::LinkConfig`]'s JSON),
//! remembering which key made each part of it; [`resolve`] checks the values
//! there and resolves the link, and names the profile's file, line and key
//! of any value it refuses (or the file and line of a trace it read).

use crate::config::ConfigError;
use serde_json::{json, Map, Value};
use std::path::{Component, Path, PathBuf};

/// The directions, as the profile names them.
pub const DIRECTIONS: [&str; 2] = ["forward", "return"];

const NUMBER_KEYS: [&str; 18] = [
    "rate_mbps",
    "rate_period_s",
    "delay_ms",
    "delay_period_s",
    "jitter_ms",
    "queue_packets",
    "queue_bytes",
    "queue_ms",
    "codel_target_ms",
    "codel_interval_ms",
    "loss",
    "ber",
    "loss_period_s",
    "leo_unit_mbps",
    "delay_trace_interval_ms",
    "fq_flows",
    "fq_quantum",
    "ce_threshold_ms",
];
/// Keys that shape a CoDel queue, and the emulator's names of them.
const AQM_KEYS: [(&str, &str); 7] = [
    ("codel_target_ms", "target_ms"),
    ("codel_interval_ms", "interval_ms"),
    ("fq_flows", "flows"),
    ("fq_quantum", "quantum"),
    ("ecn", "ecn"),
    ("ce_threshold_ms", "ce_threshold_ms"),
    ("ce_threshold_selector", "ce_threshold_selector"),
];
const SCHEDULE_KEYS: [&str; 3] = ["rate_schedule", "delay_schedule", "loss_schedule"];
/// Tables passed to the emulator as they are (it checks and names their fields).
const TABLE_KEYS: [&str; 2] = ["access", "reconfiguration"];
const FILE_KEYS: [&str; 3] = ["trace", "leo_trace", "delay_trace"];
const OTHER_KEYS: [&str; 5] = ["jitter", "reorder", "aqm", "gilbert", "ecn"];
const TOP_KEYS: [&str; 6] = [
    "name",
    "description",
    "align_minute",
    "forward",
    "return",
    "terminals",
];
/// Keys of which a direction takes at most one.
const GROUPS: [&[&str]; 3] = [
    &["rate_mbps", "rate_schedule", "trace", "leo_trace"],
    &["delay_ms", "delay_schedule", "delay_trace"],
    &["queue_packets", "queue_bytes", "queue_ms"],
];
/// A terminal key: the profile's name, the emulator's, and the factor between them.
type TerminalKey = (&'static str, &'static str, f64);
/// A terminal's keys per direction.
const TERMINAL_KEYS: [(&str, &[TerminalKey]); 2] = [
    (
        "forward",
        &[
            ("clear_sky_cn_db", "clear_sky_cn_db", 1.0),
            ("fade", "fade", 1.0),
            ("fade_loop", "fade_loop", 1.0),
        ],
    ),
    (
        "return",
        &[
            ("cra_mbps", "cra_bps", 1e6),
            ("rbdc_max_mbps", "rbdc_max_bps", 1e6),
            ("vbdc_max_bytes", "vbdc_max_bytes", 1.0),
            ("fca_max_mbps", "fca_max_bps", 1e6),
        ],
    ),
];
/// How a value of a profile key scales into the emulator's unit (Mbit/s -> bit/s).
const SCALE: [(&str, f64); 2] = [("rate_mbps", 1e6), ("rate_schedule", 1e6)];

/// Every key a direction takes, sorted (what `satbench` validates a
/// `link.forward.KEY` factor against; Python reads it from
/// `python/satbench/link/profile-keys.json`, which a test here keeps current).
pub fn keys() -> Vec<&'static str> {
    let mut k: Vec<&str> = NUMBER_KEYS
        .iter()
        .chain(SCHEDULE_KEYS.iter())
        .chain(TABLE_KEYS.iter())
        .chain(FILE_KEYS.iter())
        .chain(OTHER_KEYS.iter())
        .copied()
        .chain(["ce_threshold_selector"])
        .collect();
    k.sort_unstable();
    k.dedup();
    k
}

/// Where a profile key was given: a file and line, or a `--set` override
/// (its text as the "file", no line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub file: String,
    pub line: Option<usize>,
}

impl Origin {
    fn error(&self, field: impl Into<String>, message: impl Into<String>) -> ProfileError {
        ProfileError {
            message: message.into(),
            file: Some(self.file.clone()),
            line: self.line,
            field: Some(field.into()),
        }
    }
}

/// A profile refused: its message, and the file, line and field when known.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileError {
    pub message: String,
    pub file: Option<String>,
    pub line: Option<usize>,
    pub field: Option<String>,
}

impl std::fmt::Display for ProfileError {
    /// `FILE:LINE: FIELD: MESSAGE`, each part when known.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(file) = &self.file {
            match self.line {
                Some(l) => write!(f, "{file}:{l}: ")?,
                None => write!(f, "{file}: ")?,
            }
        }
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl ProfileError {
    fn new(
        message: impl Into<String>,
        file: Option<&str>,
        line: Option<usize>,
        field: Option<&str>,
    ) -> Self {
        ProfileError {
            message: message.into(),
            file: file.map(str::to_string),
            line,
            field: field.map(str::to_string),
        }
    }

    /// `{"ok": false, "file", "line", "field", "message"}` on one line.
    pub fn to_json_line(&self) -> String {
        json!({"ok": false, "file": self.file, "line": self.line, "field": self.field,
               "message": self.message})
        .to_string()
    }
}

/// One direction of a profile: its keys as checked (numbers as floats,
/// whole numbers as integers), and where each was given.
#[derive(Clone, Debug, PartialEq)]
pub struct Direction {
    pub name: &'static str,
    pub params: Map<String, Value>,
    origins: Vec<(String, Origin)>,
}

/// A profile as written, with its overrides applied, checked in form.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub name: String,
    pub description: String,
    pub align_minute: bool,
    pub forward: Direction,
    pub ret: Direction,
    /// Per-terminal settings as given (`[[terminals]]`), and where each was given.
    pub terminals: Vec<Terminal>,
    /// The file named in errors.
    pub file: String,
    /// The directory relative file names are read from (none: as given).
    pub base: Option<PathBuf>,
}

/// Which profile key made each part of a direction's configuration (`rate` -> `rate_mbps`).
#[derive(Default)]
struct MadeBy(Vec<(String, String)>);

impl MadeBy {
    fn add(&mut self, path: &str, key: &str) {
        self.0.push((path.to_string(), key.to_string()));
    }
}

/// One terminal's settings as given, and where.
pub type Terminal = (Map<String, Value>, Origin);

/// Which profile key (and where) made each part of the emulator's
/// configuration, by the part's path (`forward.loss[0]`).
pub type Made = Vec<(String, (String, Origin))>;

/// Line (1-based) where `key` is set inside `[table]` (or at top level).
fn line_of(text: &str, table: Option<&str>, key: &str) -> Option<usize> {
    let mut current: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix('[') {
            if let Some(end) = rest.find(']') {
                current = Some(rest[..end].trim().to_string());
                continue;
            }
        }
        if current.as_deref() == table {
            if let Some(after) = t.strip_prefix(key) {
                if after.trim_start().starts_with('=') {
                    return Some(i + 1);
                }
            }
        }
    }
    None
}

/// The line of a table header `[name]` (a sub-table such as `[forward.access]`).
fn header_line(text: &str, name: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let t = l.trim_start();
            t.strip_prefix('[')
                .and_then(|r| r.split_once(']'))
                .is_some_and(|(inner, _)| !inner.starts_with('[') && inner.trim() == name)
        })
        .map(|i| i + 1)
}

/// Python's `repr` of a value, as the messages quote what was given.
fn repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => py_float(f),
            _ => n.to_string(),
        },
        Value::String(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        Value::Array(a) => format!("[{}]", a.iter().map(repr).collect::<Vec<_>>().join(", ")),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("'{k}': {}", repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Python's `repr` of a float (`1.5`, `10.0`, `1e+30`, `nan`, `inf`).
fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        let s = format!("{f:e}");
        let (m, e) = s.split_once('e').expect("exponent");
        let e: i32 = e.parse().expect("exponent");
        return format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let s = format!("{f}");
    if s.contains('.') {
        s
    } else {
        s + ".0"
    }
}

/// Python's `format(x, "g")`: six significant digits, trailing zeros
/// dropped, an exponent outside 1e-4 to 1e6.
pub fn fmt_g(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sci = format!("{x:.5e}");
    let (m, e) = sci.split_once('e').expect("exponent");
    let exp: i32 = e.parse().expect("exponent");
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..6).contains(&exp) {
        format!(
            "{}e{}{:02}",
            trim(m),
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        )
    } else {
        let decimals = (5 - exp).max(0) as usize;
        trim(&format!("{x:.decimals$}"))
    }
}

fn to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => json!(i),
        toml::Value::Float(f) => {
            serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
        }
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        toml::Value::Table(t) => {
            Value::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
        }
    }
}

/// A number as TOML gave it (not a boolean); NaN and infinities too.
fn number(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) => Some(*f),
        _ => None,
    }
}

/// What a message quotes of a TOML value (Python's repr, NaN and infinities included).
fn repr_toml(v: &toml::Value) -> String {
    match v {
        toml::Value::Float(f) => py_float(*f),
        toml::Value::Array(a) => format!(
            "[{}]",
            a.iter().map(repr_toml).collect::<Vec<_>>().join(", ")
        ),
        other => repr(&to_json(other)),
    }
}

fn float(f: f64) -> Value {
    serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// Where a direction's keys were given, to name them in errors.
struct Table<'a> {
    name: &'static str,
    file: &'a str,
    text: &'a str,
    /// Keys an override gave, with the override's text.
    located: &'a [(String, String)],
}

impl Table<'_> {
    fn origin(&self, key: &str) -> Origin {
        if let Some((_, o)) = self.located.iter().rev().find(|(k, _)| k == key) {
            return Origin {
                file: o.clone(),
                line: None,
            };
        }
        let line = line_of(self.text, Some(self.name), key)
            .or_else(|| header_line(self.text, &format!("{}.{key}", self.name)));
        Origin {
            file: self.file.to_string(),
            line,
        }
    }

    fn fail(&self, key: &str, msg: impl Into<String>) -> ProfileError {
        self.origin(key).error(format!("{}.{key}", self.name), msg)
    }

    /// Every key known; where each was given.
    fn known(&self, raw: &toml::Table) -> Result<Vec<(String, Origin)>, ProfileError> {
        let known = keys();
        raw.keys()
            .map(|k| match known.contains(&k.as_str()) {
                true => Ok((k.clone(), self.origin(k))),
                false => Err(self.fail(k, format!("unknown key (known: {})", known.join(", ")))),
            })
            .collect()
    }

    /// Numbers finite (as floats); queue sizes whole (as integers).
    fn numbers(&self, raw: &toml::Table, p: &mut Map<String, Value>) -> Result<(), ProfileError> {
        for k in NUMBER_KEYS {
            let Some(v) = raw.get(k) else { continue };
            match number(v) {
                Some(f) if f.is_finite() => p.insert(k.into(), float(f)),
                _ => {
                    return Err(
                        self.fail(k, format!("must be a finite number, got {}", repr_toml(v)))
                    )
                }
            };
        }
        for k in ["queue_packets", "queue_bytes"] {
            if let Some(f) = p.get(k).and_then(Value::as_f64) {
                if f != f.trunc() {
                    return Err(self.fail(k, format!("must be a whole number, got {}", fmt_g(f))));
                }
                p.insert(k.into(), whole(f));
            }
        }
        Ok(())
    }

    /// At most one key of each group; a queue in ms with something to size it by.
    fn groups(&self, p: &Map<String, Value>) -> Result<(), ProfileError> {
        for g in GROUPS {
            let present: Vec<&str> = g.iter().copied().filter(|k| p.contains_key(*k)).collect();
            if present.len() > 1 {
                let msg = format!(
                    "conflicts with {}; give only one of {}",
                    present[0],
                    g.join(", ")
                );
                return Err(self.fail(present[1], msg));
            }
        }
        let sized = ["rate_mbps", "rate_schedule", "trace", "leo_trace", "access"];
        if p.contains_key("queue_ms") && !sized.iter().any(|k| p.contains_key(*k)) {
            return Err(self.fail(
                "queue_ms",
                "a queue in milliseconds needs a rate, a rate schedule, a trace or an access",
            ));
        }
        Ok(())
    }

    /// Tables where tables go, and each choice one of its words.
    fn choices(&self, raw: &toml::Table, p: &Map<String, Value>) -> Result<(), ProfileError> {
        for k in TABLE_KEYS {
            if let Some(v) = raw.get(k).filter(|v| !v.is_table()) {
                return Err(self.fail(k, format!("must be a table, got {}", repr_toml(v))));
            }
            if raw.get(k).is_some_and(|v| !all_finite(v)) {
                return Err(self.fail(k, "a value is not a finite number"));
            }
        }
        let word = |k: &str, allowed: &[&str], said: &str| -> Result<(), ProfileError> {
            match p.get(k) {
                Some(v) if !v.as_str().is_some_and(|w| allowed.contains(&w)) => {
                    Err(self.fail(k, format!("must be {said}, got {}", repr(v))))
                }
                _ => Ok(()),
            }
        };
        word(
            "jitter",
            &["uniform", "normal"],
            "\"uniform\" or \"normal\"",
        )?;
        word(
            "aqm",
            &["droptail", "codel", "fq_codel"],
            "\"droptail\", \"codel\" or \"fq_codel\"",
        )?;
        word(
            "ce_threshold_selector",
            &["all", "ect1"],
            "\"all\" or \"ect1\"",
        )?;
        for k in ["ecn", "reorder"] {
            if let Some(v) = p.get(k).filter(|v| !v.is_boolean()) {
                return Err(self.fail(k, format!("must be true or false, got {}", repr(v))));
            }
        }
        Ok(())
    }

    /// CoDel's keys only with CoDel, FQ-CoDel's only with it; its counts
    /// whole numbers the emulator can read (their ranges are its own).
    fn aqm(&self, p: &Map<String, Value>) -> Result<(), ProfileError> {
        let aqm = p.get("aqm").and_then(Value::as_str);
        for (k, _) in AQM_KEYS.iter().filter(|(k, _)| p.contains_key(*k)) {
            if !matches!(aqm, Some("codel" | "fq_codel")) {
                return Err(self.fail(
                    k,
                    "shapes a CoDel queue: set aqm = \"codel\" or \"fq_codel\"",
                ));
            }
            if k.starts_with("fq_") && aqm != Some("fq_codel") {
                return Err(self.fail(k, "is FQ-CoDel's: set aqm = \"fq_codel\""));
            }
        }
        for k in ["fq_flows", "fq_quantum"] {
            if let Some(f) = p.get(k).and_then(Value::as_f64) {
                if f != f.trunc() || !(0.0..4_294_967_296.0).contains(&f) {
                    let msg = format!(
                        "must be a whole number from 0 to 4294967295, got {}",
                        fmt_g(f)
                    );
                    return Err(self.fail(k, msg));
                }
            }
        }
        Ok(())
    }

    /// Schedules as non-empty lists of [seconds, value] pairs of finite numbers (as floats).
    fn schedules(&self, raw: &toml::Table, p: &mut Map<String, Value>) -> Result<(), ProfileError> {
        for k in SCHEDULE_KEYS {
            let Some(v) = raw.get(k) else { continue };
            let pts = match v {
                toml::Value::Array(a) if !a.is_empty() => a,
                _ => return Err(self.fail(k, "must be a non-empty list of [seconds, value] pairs")),
            };
            let mut clean = Vec::new();
            for (i, pt) in pts.iter().enumerate() {
                let pair = pt
                    .as_array()
                    .filter(|a| a.len() == 2)
                    .and_then(|a| a.iter().map(number).collect::<Option<Vec<f64>>>())
                    .filter(|x| x.iter().all(|f| f.is_finite()));
                let Some(x) = pair else {
                    let msg = format!(
                        "point {i} must be [seconds, value] with finite numbers, got {}",
                        repr_toml(pt)
                    );
                    return Err(self.fail(k, msg));
                };
                clean.push(json!([float(x[0]), float(x[1])]));
            }
            p.insert(k.into(), Value::Array(clean));
        }
        Ok(())
    }

    /// Gilbert-Elliott's table: p and r, and finite numbers only.
    fn gilbert(&self, raw: &toml::Table) -> Result<(), ProfileError> {
        let Some(g) = raw.get("gilbert") else {
            return Ok(());
        };
        let t = match g {
            toml::Value::Table(t) if t.contains_key("p") && t.contains_key("r") => t,
            _ => {
                return Err(self.fail(
                    "gilbert",
                    "must be a table with p and r (and optional loss_good, loss_bad)",
                ))
            }
        };
        for (gk, gv) in t {
            if !["p", "r", "loss_good", "loss_bad"].contains(&gk.as_str()) {
                return Err(self.fail("gilbert", format!("unknown key '{gk}'")));
            }
            if !number(gv).is_some_and(f64::is_finite) {
                return Err(self.fail(
                    "gilbert",
                    format!("{gk} must be a finite number, got {}", repr_toml(gv)),
                ));
            }
        }
        Ok(())
    }

    /// File names as strings.
    fn files(&self, p: &Map<String, Value>) -> Result<(), ProfileError> {
        for k in FILE_KEYS {
            if let Some(v) = p.get(k).filter(|v| !v.is_string()) {
                return Err(self.fail(k, format!("must be a file name, got {}", repr(v))));
            }
        }
        Ok(())
    }
}

/// Check one direction table's form; errors name the file, line and field.
fn check_direction(
    raw: Option<&toml::Value>,
    name: &'static str,
    file: &str,
    text: &str,
    located: &[(String, String)],
) -> Result<Direction, ProfileError> {
    let empty = toml::Table::new();
    let raw = match raw {
        None => &empty,
        Some(toml::Value::Table(t)) => t,
        Some(_) => {
            return Err(ProfileError::new(
                "must be a table",
                Some(file),
                None,
                Some(name),
            ))
        }
    };
    let at = Table {
        name,
        file,
        text,
        located,
    };
    let origins = at.known(raw)?;
    let mut p: Map<String, Value> = raw.iter().map(|(k, v)| (k.clone(), to_json(v))).collect();
    at.numbers(raw, &mut p)?;
    at.groups(&p)?;
    at.choices(raw, &p)?;
    at.aqm(&p)?;
    at.schedules(raw, &mut p)?;
    at.gilbert(raw)?;
    at.files(&p)?;
    Ok(Direction {
        name,
        params: p,
        origins,
    })
}

/// A whole number as JSON: an integer where it fits, else the float.
fn whole(f: f64) -> Value {
    if f.abs() < 9.2e18 {
        json!(f as i64)
    } else {
        float(f)
    }
}

/// Whether every number in a value is finite (TOML has `nan` and `inf`;
/// JSON, and so the emulator, has neither).
fn all_finite(v: &toml::Value) -> bool {
    match v {
        toml::Value::Float(f) => f.is_finite(),
        toml::Value::Array(a) => a.iter().all(all_finite),
        toml::Value::Table(t) => t.values().all(all_finite),
        _ => true,
    }
}

/// Check a profile's text (TOML) with `--set` overrides: its form, with where
/// each key was given. `file` names it in errors; relative file names in it
/// are read from `base`.
pub fn parse(
    text: &str,
    file: &str,
    overrides: &[String],
    base: Option<&Path>,
) -> Result<Profile, ProfileError> {
    let mut data: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let newlines = |end: usize| {
            text.as_bytes()[..end.min(text.len())]
                .iter()
                .filter(|b| **b == b'\n')
                .count()
        };
        let line = e.span().map(|s| newlines(s.start) + 1);
        let first = e.message().lines().next().unwrap_or("").to_string();
        ProfileError::new(format!("not valid TOML: {first}"), Some(file), line, None)
    })?;
    for k in data.keys() {
        if !TOP_KEYS.contains(&k.as_str()) {
            let mut known = TOP_KEYS.to_vec();
            known.sort_unstable();
            return Err(ProfileError::new(
                format!("unknown key (known: {})", known.join(", ")),
                Some(file),
                line_of(text, None, k),
                Some(k),
            ));
        }
    }
    let name = match data.get("name") {
        Some(toml::Value::String(s)) if is_name(s) => s.clone(),
        _ => {
            return Err(ProfileError::new(
                "must be a name of letters, digits, '.', '_' or '-'",
                Some(file),
                line_of(text, None, "name"),
                Some("name"),
            ))
        }
    };
    let align_minute = match data.get("align_minute") {
        None => false,
        Some(toml::Value::Boolean(b)) => *b,
        Some(_) => {
            return Err(ProfileError::new(
                "must be true or false",
                Some(file),
                line_of(text, None, "align_minute"),
                Some("align_minute"),
            ))
        }
    };
    let description = match data.get("description") {
        None => String::new(),
        Some(toml::Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(ProfileError::new(
                "must be a string",
                Some(file),
                line_of(text, None, "description"),
                Some("description"),
            ))
        }
    };
    let mut located: [Vec<(String, String)>; 2] = [Vec::new(), Vec::new()];
    for ov in overrides {
        apply_override(&mut data, ov, &mut located)?;
    }
    let forward = check_direction(data.get("forward"), "forward", file, text, &located[0])?;
    let ret = check_direction(data.get("return"), "return", file, text, &located[1])?;
    let terminals = check_terminals(data.get("terminals"), file, text)?;
    Ok(Profile {
        name,
        description,
        align_minute,
        forward,
        ret,
        terminals,
        file: file.to_string(),
        base: base.map(Path::to_path_buf),
    })
}

/// A profile's name: letters, digits, '.', '_' and '-', not starting with a sign.
pub fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_alphanumeric())
        && c.all(|x| x.is_ascii_alphanumeric() || matches!(x, '.' | '_' | '-'))
}

fn apply_override(
    data: &mut toml::Table,
    ov: &str,
    located: &mut [Vec<(String, String)>; 2],
) -> Result<(), ProfileError> {
    let set = Some("--set");
    let Some((key, value)) = ov
        .split_once('=')
        .map(|(k, v)| (k.trim(), v.trim()))
        .filter(|(k, _)| !k.is_empty())
    else {
        return Err(ProfileError::new(
            format!("expected KEY=VALUE, got {}", repr(&json!(ov))),
            set,
            None,
            None,
        ));
    };
    let parsed = format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let (dirs, leaf) = key.rsplit_once('.').map_or(("", key), |(d, l)| (d, l));
    let targets: Vec<&str> = if dirs.is_empty() {
        DIRECTIONS.to_vec()
    } else {
        vec![dirs]
    };
    for d in targets {
        let Some(i) = DIRECTIONS.iter().position(|x| *x == d) else {
            return Err(ProfileError::new(
                format!(
                    "unknown direction {} (use forward or return)",
                    repr(&json!(d))
                ),
                set,
                None,
                Some(key),
            ));
        };
        let known = keys();
        if !known.contains(&leaf) {
            return Err(ProfileError::new(
                format!("unknown key (known: {})", known.join(", ")),
                set,
                None,
                Some(key),
            ));
        }
        let table = data
            .entry(d)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(table) = table else {
            return Err(ProfileError::new("must be a table", set, None, Some(d)));
        };
        for group in GROUPS {
            if group.contains(&leaf) {
                for other in group {
                    table.remove(*other);
                }
            }
        }
        table.insert(leaf.to_string(), parsed.clone());
        located[i].push((leaf.to_string(), format!("--set {ov}")));
    }
    Ok(())
}

/// The `[[terminals]]` tables' form: known keys, numbers where numbers go.
fn check_terminals(
    raw: Option<&toml::Value>,
    file: &str,
    text: &str,
) -> Result<Vec<Terminal>, ProfileError> {
    let heads: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim_start();
            t.strip_prefix("[[")
                .and_then(|r| r.split_once("]]"))
                .is_some_and(|(inner, _)| inner.trim() == "terminals")
        })
        .map(|(i, _)| i + 1)
        .collect();
    let list = match raw {
        None => return Ok(Vec::new()),
        Some(toml::Value::Array(a)) if a.iter().all(toml::Value::is_table) => a,
        Some(_) => {
            return Err(ProfileError::new(
                "must be tables ([[terminals]])",
                Some(file),
                line_of(text, None, "terminals"),
                Some("terminals"),
            ))
        }
    };
    let mut out = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let o = Origin {
            file: file.to_string(),
            line: heads.get(i).copied(),
        };
        let t = t.as_table().expect("a table");
        let mut dirs = Map::new();
        for (direction, v) in t {
            let Some((_, keys)) = TERMINAL_KEYS.iter().find(|(d, _)| d == direction) else {
                return Err(o.error(
                    format!("terminals[{i}].{direction}"),
                    "unknown key (known: forward, return)",
                ));
            };
            let toml::Value::Table(v) = v else {
                return Err(o.error(format!("terminals[{i}].{direction}"), "must be a table"));
            };
            let mut d = Map::new();
            for (k, x) in v {
                let at = format!("terminals[{i}].{direction}.{k}");
                if !keys.iter().any(|(n, _, _)| n == k) {
                    let names: Vec<&str> = keys.iter().map(|(n, _, _)| *n).collect();
                    return Err(o.error(at, format!("unknown key (known: {})", names.join(", "))));
                }
                match k.as_str() {
                    "fade" => {
                        let ok = x.is_str()
                            || x.as_array().is_some_and(|pts| {
                                pts.iter().all(|pt| {
                                    pt.as_array().is_some_and(|p| {
                                        p.len() == 2
                                            && p.iter()
                                                .all(|n| number(n).is_some_and(f64::is_finite))
                                    })
                                })
                            });
                        if !ok {
                            return Err(o.error(
                                at,
                                "must be a file name or a list of [seconds, dB] points",
                            ));
                        }
                    }
                    "fade_loop" => {
                        if !x.is_bool() {
                            return Err(o.error(
                                at,
                                format!("must be true or false, got {}", repr_toml(x)),
                            ));
                        }
                    }
                    _ => match number(x) {
                        Some(f) if f.is_finite() => {
                            if k.ends_with("_bytes") && f != f.trunc() {
                                return Err(o.error(
                                    at,
                                    format!("must be a whole number, got {}", repr_toml(x)),
                                ));
                            }
                        }
                        _ => {
                            return Err(o.error(
                                at,
                                format!("must be a finite number, got {}", repr_toml(x)),
                            ))
                        }
                    },
                }
                let value = match number(x) {
                    Some(f) if k.ends_with("_bytes") => whole(f),
                    _ => to_json(x),
                };
                d.insert(k.clone(), value);
            }
            dirs.insert(direction.clone(), Value::Object(d));
        }
        out.push((dirs, o));
    }
    Ok(out)
}

/// A file name given in a profile, read relative to the profile's directory.
fn resolve_path(base: Option<&Path>, name: &str) -> String {
    let p = Path::new(name);
    let joined = match base {
        Some(b) if !p.is_absolute() => b.join(p),
        _ => p.to_path_buf(),
    };
    // As Python's pathlib writes it: no "." parts, no trailing slash.
    let mut out = PathBuf::new();
    for c in joined.components() {
        if c != Component::CurDir {
            out.push(c.as_os_str());
        }
    }
    out.to_string_lossy().into_owned()
}

impl Direction {
    fn get(&self, k: &str) -> Option<&Value> {
        self.params.get(k)
    }

    fn f(&self, k: &str, default: f64) -> f64 {
        self.get(k).and_then(Value::as_f64).unwrap_or(default)
    }

    /// This direction's part of the emulator's configuration, and for each
    /// part of it the profile key that made it (`rate` -> `rate_mbps`).
    fn config(&self, base: Option<&Path>) -> (Value, Vec<(String, String)>) {
        let mut made = MadeBy::default();
        let mut d = Map::new();
        if let Some(rate) = self.rate(base, &mut made) {
            d.insert("rate".into(), rate);
        }
        d.insert("delay".into(), self.delay(base, &mut made));
        if self.f("jitter_ms", 0.0) != 0.0 {
            let kind = self
                .get("jitter")
                .and_then(Value::as_str)
                .unwrap_or("uniform");
            d.insert(
                "jitter".into(),
                json!({"kind": kind, "ms": float(self.f("jitter_ms", 0.0))}),
            );
            made.add("jitter", "jitter_ms");
        }
        let reorder = self
            .get("reorder")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        d.insert("reorder".into(), Value::Bool(reorder));
        d.insert("queue".into(), self.queue(&mut made));
        d.insert("loss".into(), self.losses(&mut made));
        for key in TABLE_KEYS {
            if let Some(v) = self.get(key) {
                d.insert(key.into(), v.clone());
                made.add(key, key);
            }
        }
        (Value::Object(d), made.0)
    }

    /// A schedule's points, values times `scale`.
    fn points(&self, k: &str, scale: f64) -> Value {
        let pts = self.params[k]
            .as_array()
            .expect("checked")
            .iter()
            .map(|pt| {
                let a = pt.as_array().expect("checked");
                json!([a[0], float(a[1].as_f64().expect("checked") * scale)])
            });
        Value::Array(pts.collect())
    }

    fn rate(&self, base: Option<&Path>, made: &mut MadeBy) -> Option<Value> {
        if self.get("rate_mbps").is_some() {
            made.add("rate", "rate_mbps");
            return Some(json!({"kind": "constant", "bps": float(self.f("rate_mbps", 0.0) * 1e6)}));
        }
        if self.get("rate_schedule").is_some() {
            made.add("rate", "rate_schedule");
            made.add("rate.period_s", "rate_period_s");
            let period = float(self.f("rate_period_s", 0.0));
            return Some(
                json!({"kind": "schedule", "points": self.points("rate_schedule", 1e6), "period_s": period}),
            );
        }
        if let Some(t) = self.get("trace").and_then(Value::as_str) {
            made.add("rate", "trace");
            return Some(json!({"kind": "trace", "path": resolve_path(base, t)}));
        }
        let t = self.get("leo_trace").and_then(Value::as_str)?;
        made.add("rate", "leo_trace");
        made.add("rate.unit_bps", "leo_unit_mbps");
        let unit = float(self.f("leo_unit_mbps", 12.0) * 1e6);
        Some(json!({"kind": "leo_trace", "unit_bps": unit, "path": resolve_path(base, t)}))
    }

    fn delay(&self, base: Option<&Path>, made: &mut MadeBy) -> Value {
        if self.get("delay_schedule").is_some() {
            made.add("delay", "delay_schedule");
            made.add("delay.period_s", "delay_period_s");
            let period = float(self.f("delay_period_s", 0.0));
            return json!({"kind": "schedule", "points": self.points("delay_schedule", 1.0), "period_s": period});
        }
        if let Some(t) = self.get("delay_trace").and_then(Value::as_str) {
            made.add("delay", "delay_trace");
            made.add("delay.interval_ms", "delay_trace_interval_ms");
            let interval = float(self.f("delay_trace_interval_ms", 10.0));
            return json!({"kind": "leo_trace", "interval_ms": interval, "path": resolve_path(base, t)});
        }
        made.add("delay", "delay_ms");
        json!({"kind": "constant", "ms": float(self.f("delay_ms", 0.0))})
    }

    fn queue(&self, made: &mut MadeBy) -> Value {
        let mut limit = json!({"kind": "unlimited"});
        for (key, kind, field) in [
            ("queue_packets", "packets", "n"),
            ("queue_bytes", "bytes", "n"),
            ("queue_ms", "ms", "ms"),
        ] {
            if let Some(v) = self.get(key) {
                limit = json!({"kind": kind, field: v});
                made.add("queue.limit", key);
            }
        }
        let mut aqm = json!({"kind": "drop_tail"});
        if let Some(kind @ ("codel" | "fq_codel")) = self.get("aqm").and_then(Value::as_str) {
            aqm = json!({"kind": kind, "target_ms": float(self.f("codel_target_ms", 5.0)),
                         "interval_ms": float(self.f("codel_interval_ms", 100.0))});
            made.add("queue.aqm", "aqm");
            made.add("queue.aqm.kind", "aqm");
            for (key, name) in AQM_KEYS {
                match self.get(key) {
                    Some(v) => {
                        aqm[name] = if key.starts_with("fq_") {
                            whole(v.as_f64().expect("checked"))
                        } else {
                            v.clone()
                        };
                        made.add(&format!("queue.aqm.{name}"), key);
                    }
                    None => made.add(&format!("queue.aqm.{name}"), "aqm"),
                }
            }
        }
        json!({"limit": limit, "aqm": aqm})
    }

    /// The loss models in order: Bernoulli, bit errors, Gilbert-Elliott, the
    /// schedule. A zero loss adds no model (a profile that says `ber = 0` is
    /// the same link as one that says nothing).
    fn losses(&self, made: &mut MadeBy) -> Value {
        let mut loss: Vec<Value> = Vec::new();
        let mut add = |key: &str, entry: Value| {
            made.add(&format!("loss[{}]", loss.len()), key);
            if key == "loss_schedule" {
                made.add(&format!("loss[{}].period_s", loss.len()), "loss_period_s");
            }
            loss.push(entry);
        };
        if self.f("loss", 0.0) != 0.0 {
            add(
                "loss",
                json!({"kind": "bernoulli", "p": float(self.f("loss", 0.0))}),
            );
        }
        if self.f("ber", 0.0) != 0.0 {
            add(
                "ber",
                json!({"kind": "ber", "ber": float(self.f("ber", 0.0))}),
            );
        }
        if let Some(g) = self.get("gilbert") {
            let n = |k: &str, dflt: f64| g.get(k).cloned().unwrap_or_else(|| float(dflt));
            add(
                "gilbert",
                json!({"kind": "gilbert", "p": g["p"], "r": g["r"], "loss_good": n("loss_good", 0.0),
                                  "loss_bad": n("loss_bad", 1.0)}),
            );
        }
        if self.get("loss_schedule").is_some() {
            let period = float(self.f("loss_period_s", 0.0));
            add(
                "loss_schedule",
                json!({"kind": "schedule", "points": self.params["loss_schedule"], "period_s": period}),
            );
        }
        Value::Array(loss)
    }

    fn origin(&self, key: &str, default: &Origin) -> Origin {
        self.origins
            .iter()
            .find(|(k, _)| k == key)
            .map_or_else(|| default.clone(), |(_, o)| o.clone())
    }
}

impl Profile {
    /// The emulator's configuration (no seed), and for each part of it (a
    /// path such as `forward.loss[0]`) the profile field and where it was given.
    pub fn config(&self) -> (Value, Made) {
        let base = self.base.as_deref();
        let whole_file = Origin {
            file: self.file.clone(),
            line: None,
        };
        let mut cfg = Map::new();
        cfg.insert("align_minute".into(), Value::Bool(self.align_minute));
        let mut made: Made = Vec::new();
        for (name, d) in [("forward", &self.forward), ("return", &self.ret)] {
            let (c, parts) = d.config(base);
            cfg.insert(name.into(), c);
            for (path, key) in parts {
                made.push((
                    format!("{name}.{path}"),
                    (format!("{name}.{key}"), d.origin(&key, &whole_file)),
                ));
            }
        }
        if let Some((_, first)) = self.terminals.first() {
            made.push(("terminals".into(), ("terminals".into(), first.clone())));
            let mut list = Vec::new();
            for (i, (t, o)) in self.terminals.iter().enumerate() {
                list.push(terminal_config(t, base));
                made.push((
                    format!("terminals[{i}]"),
                    (format!("terminals[{i}]"), o.clone()),
                ));
            }
            cfg.insert("terminals".into(), Value::Array(list));
        }
        (Value::Object(cfg), made)
    }

    /// The profile as checked, for the caller's summaries: name,
    /// description, each direction's keys, the terminals as given.
    pub fn to_json(&self) -> Value {
        json!({"name": self.name, "description": self.description, "align_minute": self.align_minute,
               "forward": self.forward.params, "return": self.ret.params,
               "terminals": self.terminals.iter().map(|(t, _)| Value::Object(t.clone())).collect::<Vec<_>>()})
    }
}

/// One terminal's emulator configuration from its profile table.
fn terminal_config(t: &Map<String, Value>, base: Option<&Path>) -> Value {
    let mut out = Map::new();
    for (direction, keys) in TERMINAL_KEYS {
        let Some(given) = t
            .get(direction)
            .and_then(Value::as_object)
            .filter(|g| !g.is_empty())
        else {
            continue;
        };
        let mut d = Map::new();
        for (k, v) in given {
            let (_, name, scale) = keys.iter().find(|(n, _, _)| n == k).expect("checked");
            match k.as_str() {
                "fade" => {
                    let fade = match v {
                        Value::String(s) => json!({"path": resolve_path(base, s)}),
                        pts => json!({"points": pts.as_array().expect("checked").iter().map(|pt| {
                            let a = pt.as_array().expect("checked");
                            json!([float(a[0].as_f64().unwrap_or(0.0)), float(a[1].as_f64().unwrap_or(0.0))])
                        }).collect::<Vec<_>>()}),
                    };
                    d.insert("fade".into(), fade);
                }
                "fade_loop" => {}
                _ if *scale != 1.0 => {
                    d.insert((*name).into(), float(v.as_f64().expect("checked") * scale));
                }
                _ => {
                    d.insert((*name).into(), v.clone());
                }
            }
        }
        if let (Some(fade), Some(lp)) = (d.get_mut("fade"), given.get("fade_loop")) {
            fade["loop"] = lp.clone();
        }
        out.insert(direction.into(), Value::Object(d));
    }
    Value::Object(out)
}

/// The configuration for a testbed of `subnets.len()` terminals: the
/// profile's terminal settings used in turn (cycling; none given:
/// defaults), each given its subnets. One terminal needs no subnets (every
/// packet goes to it): a configuration for one is returned unchanged.
pub fn with_terminals(mut config: Value, subnets: &[Vec<String>]) -> Value {
    if subnets.len() <= 1 {
        return config;
    }
    let given = config
        .get("terminals")
        .and_then(Value::as_array)
        .filter(|g| !g.is_empty())
        .cloned()
        .unwrap_or_else(|| vec![json!({})]);
    let list: Vec<Value> = subnets
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut t = given[i % given.len()].clone();
            t["subnets"] = json!(s);
            t
        })
        .collect();
    config["terminals"] = Value::Array(list);
    config
}

/// The part of a configuration at a path such as `terminals[0].forward`.
fn node<'a>(config: &'a Value, path: &str) -> Option<&'a Value> {
    let mut n = config;
    for part in path.split('.') {
        let (name, indexes) = part.split_once('[').map_or((part, ""), |(a, b)| (a, b));
        if !name.is_empty() {
            n = n.get(name)?;
        }
        for ix in indexes.split('[').filter(|s| !s.is_empty()) {
            n = n.get(ix.trim_end_matches(']').parse::<usize>().ok()?)?;
        }
    }
    Some(n)
}

/// The file a configuration part reads (its `path`), nearest the field named by `rest`.
fn file_of(n: &Value, rest: &str) -> Option<String> {
    let m = n.as_object()?;
    if let Some(p) = m.get("path").and_then(Value::as_str) {
        return Some(p.to_string());
    }
    let rest = rest.strip_prefix('.').unwrap_or(rest);
    let first: String = rest
        .chars()
        .take_while(|c| !matches!(c, '.' | '[' | ']'))
        .collect();
    if !first.is_empty() {
        if let Some(child) = m.get(&first) {
            return file_of(child, &rest[first.len()..]);
        }
    }
    m.values().find_map(|v| file_of(v, ""))
}

/// The profile key, file and line behind a configuration field the emulator refused.
fn blame(profile: &Profile, made: &Made, config: &Value, e: &ConfigError) -> ProfileError {
    let cfield = e.field.as_str();
    let mut message = e.message.clone();
    let best = made
        .iter()
        .filter(|(path, _)| {
            cfield == path
                || cfield.starts_with(&format!("{path}."))
                || cfield.starts_with(&format!("{path}["))
        })
        .max_by_key(|(path, _)| path.len());
    let Some((best, (key, origin))) = best else {
        return ProfileError::new(message, Some(&profile.file), None, Some(cfield));
    };
    let rest = &cfield[best.len()..];
    // A file the emulator read (a trace, a LEO trace, a fade): it names the file's line.
    if let Some(read) = node(config, best).and_then(|n| file_of(n, rest)) {
        let after = message
            .split_once(": line ")
            .map(|(_, r)| r)
            .or_else(|| message.strip_prefix("line "));
        if let Some((n, msg)) = after.and_then(|r| r.split_once(": ")) {
            if let Ok(line) = n.parse::<usize>() {
                return ProfileError::new(msg, Some(&read), Some(line), None);
            }
        }
        if message.contains(&read) {
            let msg = message
                .replace(&format!(" {read}:"), ":")
                .replace(&read, "it");
            return ProfileError::new(msg, Some(&read), None, None);
        }
    }
    let range = e.range.filter(|r| r.value.is_finite());
    if key.starts_with("terminals[") {
        // A terminal's own key: named as the profile names it (Mbit/s where the emulator has bit/s).
        let mut rest = rest.to_string();
        if let Some(stem) = rest.strip_suffix("_bps") {
            rest = format!("{stem}_mbps");
            if let Some(r) = range {
                message = format!(
                    "must be from {} to {} Mbit/s, got {}",
                    fmt_g(r.min / 1e6),
                    fmt_g(r.max / 1e6),
                    fmt_g(r.value / 1e6)
                );
            }
        }
        return origin.error(format!("{key}{rest}"), message);
    }
    let leaf = key.split_once('.').map_or(key.as_str(), |(_, l)| l);
    if let (Some((_, scale)), Some(r)) = (SCALE.iter().find(|(k, _)| *k == leaf), range) {
        message = format!(
            "must be from {} to {} Mbit/s{}, got {}",
            fmt_g(r.min / scale),
            fmt_g(r.max / scale),
            if leaf == "rate_schedule" {
                " (or 0 for an outage)"
            } else {
                ""
            },
            fmt_g(r.value / scale)
        );
    }
    if let Some(i) = cfield.find("points[") {
        let n: String = cfield[i + 7..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if message.starts_with("schedule point") {
            message = message.replacen("schedule point", "point", 1);
        } else if !message.starts_with("point") {
            message = format!("point {n}: {message}");
        }
    }
    origin.error(key.clone(), message)
}

impl Profile {
    /// Check the values and resolve the link (for `subnets.len()` terminals,
    /// as [`with_terminals`]): `{"config", "derived"}` as
    /// [`crate::config::check`] gives them, or the refusal named by the
    /// profile's file, line and key.
    pub fn resolve(&self, subnets: Option<&[Vec<String>]>) -> Result<Value, ProfileError> {
        let (config, made) = self.config();
        let config = match subnets {
            Some(s) => with_terminals(config, s),
            None => config,
        };
        let checked = crate::config::check(&config.to_string())
            .map_err(|e| blame(self, &made, &config, &e))?;
        Ok(serde_json::from_str(&checked.to_json_line()).expect("the check's own JSON"))
    }
}

/// `satbench-link --check --profile`'s answer: `{"ok": true, "profile",
/// "config", "derived"}`; a profile whose form is wrong, `{"ok": false,
/// "stage": "form", "file", "line", "field", "message"}`; one whose values
/// the emulator refuses, the same with `"stage": "values"` and the
/// `profile` as checked in form.
pub fn answer(
    text: &str,
    file: &str,
    overrides: &[String],
    base: Option<&Path>,
    subnets: Option<&[Vec<String>]>,
) -> Value {
    let refusal = |e: &ProfileError, stage: &str| -> Value {
        let mut v: Value = serde_json::from_str(&e.to_json_line()).expect("own JSON");
        v["stage"] = stage.into();
        v
    };
    let profile = match parse(text, file, overrides, base) {
        Ok(p) => p,
        Err(e) => return refusal(&e, "form"),
    };
    let mut out = match profile.resolve(subnets) {
        Ok(v) => v,
        Err(e) => refusal(&e, "values"),
    };
    out["profile"] = profile.to_json();
    out
}

/// [`answer`], as a result (for tests and callers in Rust).
pub fn resolve(
    text: &str,
    file: &str,
    overrides: &[String],
    base: Option<&Path>,
    subnets: Option<&[Vec<String>]>,
) -> Result<Value, ProfileError> {
    let profile = parse(text, file, overrides, base)?;
    let mut v = profile.resolve(subnets)?;
    v["profile"] = profile.to_json();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str, sets: &[&str]) -> ProfileError {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        resolve(text, "p.toml", &sets, None, None).unwrap_err()
    }

    #[test]
    fn numbers_are_written_as_python_writes_them() {
        let cases = [
            (0.0, "0"),
            (0.001, "0.001"),
            (1e6, "1e+06"),
            (-2.0, "-2"),
            (1e30, "1e+30"),
            (1.5, "1.5"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
        ];
        for (x, s) in cases {
            assert_eq!(fmt_g(x), s, "{x}");
        }
        assert_eq!(
            (py_float(10.0), py_float(1e30), py_float(1.5)),
            ("10.0".into(), "1e+30".into(), "1.5".into())
        );
    }

    #[test]
    fn a_profile_becomes_the_emulators_configuration() {
        let a = resolve(
            "name = \"x\"\n[forward]\nrate_mbps = 10\ndelay_ms = 265\nqueue_ms = 530\nber = 1e-7\n",
            "p.toml",
            &[],
            None,
            None,
        )
        .unwrap();
        assert_eq!(a["ok"], true);
        assert_eq!(a["config"]["forward"]["rate"]["bps"], 1e7);
        assert_eq!(a["derived"]["base_rtt_ms"], 265.0);
        assert_eq!(a["profile"]["forward"]["delay_ms"], 265.0);
        // An override replaces what it conflicts with.
        let b = resolve(
            "name = \"x\"\n[forward]\nrate_mbps = 10\n",
            "p.toml",
            &["forward.rate_schedule=[[0, 5]]".into()],
            None,
            None,
        )
        .unwrap();
        assert_eq!(b["config"]["forward"]["rate"]["kind"], "schedule");
    }

    #[test]
    fn every_refusal_names_file_line_and_field() {
        let e = err("name = \"x\"\n[forward]\ndelay_ms = -5\n", &[]);
        assert_eq!(
            e.to_string(),
            "p.toml:3: forward.delay_ms: delay (ms) must be within 0 and 3600000, got -5"
        );
        let e = err("name = \"x\"\n[forward]\n[return]\nrate_mbps = 0\n", &[]);
        assert_eq!(
            e.to_string(),
            "p.toml:4: return.rate_mbps: must be from 0.001 to 1e+06 Mbit/s, got 0"
        );
        let e = err("name = \"x\"\n[forward]\nrate_mbps = = 3\n", &[]);
        assert_eq!((e.line, e.field.as_deref()), (Some(3), None));
        let e = err("name = \"x\"\n[forward]\ncolour = 1\n", &[]);
        assert_eq!(
            (e.line, e.field.as_deref()),
            (Some(3), Some("forward.colour"))
        );
        let e = err(
            "name = \"x\"\n[forward]\nrate_mbps = 1\nrate_schedule = [[0, 1]]\n",
            &[],
        );
        assert!(
            e.to_string()
                .starts_with("p.toml:4: forward.rate_schedule: conflicts with rate_mbps"),
            "{e}"
        );
        let e = err(
            "name = \"x\"\n[forward]\nrate_schedule = [[0, 1], [3, -1]]\n",
            &[],
        );
        assert!(
            e.to_string()
                .starts_with("p.toml:3: forward.rate_schedule: point 1: "),
            "{e}"
        );
        let e = err("name = \"x\"\n[return]\nrate_mbps = 2\n[return.access]\nkind = \"dama\"\nsuperframe_ms = 0\n", &[]);
        assert_eq!(
            (e.line, e.field.as_deref()),
            (Some(4), Some("return.access"))
        );
        let e = err(
            "name = \"x\"\n\n[[terminals]]\nforward = { colour = 1 }\n",
            &[],
        );
        assert_eq!(
            (e.line, e.field.as_deref()),
            (Some(3), Some("terminals[0].forward.colour"))
        );
        let e = err("name = \"x\"\n[return]\nrate_mbps = 2\n[return.access]\nkind = \"dama\"\n[[terminals]]\nreturn = { cra_mbps = -1 }\n", &[]);
        assert_eq!(
            e.to_string(),
            "p.toml:6: terminals[0].return.cra_mbps: must be from 0 to 1e+06 Mbit/s, got -1"
        );
        let e = err(
            "name = \"geo\"\n[forward]\ndelay_ms = 1\n",
            &["forward.delay_ms=-1"],
        );
        assert_eq!(e.to_string(), "--set forward.delay_ms=-1: forward.delay_ms: delay (ms) must be within 0 and 3600000, got -1");
        assert!(err("name = \"x\"\n", &["sideways.delay_ms=1"])
            .to_string()
            .contains("unknown direction 'sideways'"));
        assert!(err("name = \"x\"\n", &["delay_ms"])
            .to_string()
            .contains("KEY=VALUE"));
    }

    #[test]
    fn the_answer_says_which_stage_refused() {
        let a = answer(
            "name = \"x\"\n[forward]\ncolour = 1\n",
            "p.toml",
            &[],
            None,
            None,
        );
        assert_eq!(
            (a["ok"].as_bool(), a["stage"].as_str()),
            (Some(false), Some("form"))
        );
        assert!(a.get("profile").is_none());
        // Values the emulator refuses: the profile as checked in form comes with the refusal.
        let a = answer(
            "name = \"x\"\n[forward]\ndelay_ms = -1\n",
            "p.toml",
            &[],
            None,
            None,
        );
        assert_eq!(
            (a["stage"].as_str(), a["line"].as_u64()),
            (Some("values"), Some(3))
        );
        assert_eq!(a["profile"]["name"], "x");
    }

    #[test]
    fn a_value_that_is_not_finite_is_refused_wherever_it_is() {
        // TOML has nan and inf, JSON neither: a table passed to the emulator would lose them.
        let e = err("name = \"x\"\n[return]\nrate_mbps = 2\n[return.access]\nkind = \"dama\"\nsuperframe_ms = nan\n", &[]);
        assert_eq!(
            (e.line, e.field.as_deref()),
            (Some(4), Some("return.access"))
        );
        assert!(e.message.contains("not a finite number"), "{e}");
        let e = err(
            "name = \"x\"\n[[terminals]]\nforward = { fade = [[0, inf]] }\n",
            &[],
        );
        assert_eq!(e.field.as_deref(), Some("terminals[0].forward.fade"));
    }

    #[test]
    fn several_terminals_each_get_their_subnets() {
        let text = "name = \"x\"\n[return]\nrate_mbps = 4\n[return.access]\nkind = \"dama\"\n[[terminals]]\nreturn = { cra_mbps = 1 }\n";
        let nets = vec![
            vec!["10.1.0.0/16".to_string()],
            vec!["10.2.0.0/16".to_string()],
        ];
        let a = resolve(text, "p.toml", &[], None, Some(&nets)).unwrap();
        let t = a["config"]["terminals"].as_array().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1]["subnets"], json!(["10.2.0.0/16"]));
    }

    /// The keys a direction takes, as Python reads them
    /// (`python/satbench/link/profile-keys.json`; written with
    /// `SATBENCH_BLESS=1`, compared otherwise).
    #[test]
    fn the_key_list_python_reads_is_current() {
        let text = serde_json::to_string_pretty(&keys()).unwrap() + "\n";
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../python/satbench/link/profile-keys.json");
        if std::env::var_os("SATBENCH_BLESS").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        assert_eq!(
            std::fs::read_to_string(&path).unwrap_or_default(),
            text,
            "{} is stale: SATBENCH_BLESS=1 cargo test -p satlink profile",
            path.display()
        );
    }
}
