//! Deterministic replay (`--replay-deterministic`): a script put at the top
//! of every replayed HTML page, as Web Page Replay does, so that the page's
//! scripts see the time the site was recorded at (advancing 50 ms every 25
//! calls) and one fixed sequence of random numbers (`Math.random`,
//! `crypto.getRandomValues`). A URL a script builds from them (a
//! cache-buster, an ad auction's id) is then the same on every load, and the
//! one the recording holds when the recording was made the same way.
//!
//! `performance.now()` and the browser's own timing are untouched: the
//! page's metrics are real. Sans-IO: [`script`] and [`inject`] are pure.

/// The seed of the random sequence (any fixed number: the same on every load).
pub const SEED: u32 = 0x5a7b_e9c1;

/// The script for a site recorded at `time_ms` (unix ms), in a `<script>` element.
pub fn script(time_ms: u64) -> String {
    format!(
        "<script>/* satbench: deterministic replay */(() => {{\
const RealDate = Date; let now = {time_ms}; let calls = 0;\
const tick = () => {{ if (++calls > 25) {{ now += 50; calls = 1; }} return now; }};\
function FixedDate(...a) {{\
 if (!new.target) return new RealDate(tick()).toString();\
 return Reflect.construct(RealDate, a.length ? a : [tick()], new.target); }}\
FixedDate.prototype = RealDate.prototype; Object.setPrototypeOf(FixedDate, RealDate);\
RealDate.prototype.constructor = FixedDate;\
FixedDate.now = () => tick(); FixedDate.parse = RealDate.parse; FixedDate.UTC = RealDate.UTC;\
globalThis.Date = FixedDate;\
let seed = {SEED};\
const next = () => {{ seed = (seed + 0x6D2B79F5) >>> 0; let t = seed;\
 t = Math.imul(t ^ (t >>> 15), t | 1); t ^= t + Math.imul(t ^ (t >>> 7), t | 61);\
 return ((t ^ (t >>> 14)) >>> 0) / 4294967296; }};\
Math.random = next;\
if (globalThis.crypto && crypto.getRandomValues) {{\
 crypto.getRandomValues = (a) => {{ const b = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);\
 for (let i = 0; i < b.length; i++) b[i] = Math.floor(next() * 256); return a; }};\
 crypto.randomUUID = () => {{ const b = crypto.getRandomValues(new Uint8Array(16));\
 b[6] = (b[6] & 15) | 64; b[8] = (b[8] & 63) | 128;\
 const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');\
 return h.slice(0, 8) + '-' + h.slice(8, 12) + '-' + h.slice(12, 16) + '-' + h.slice(16, 20) + '-' + h.slice(20); }}; }}\
}})();</script>"
    )
}

/// `html` with `script` put where it runs before any of the page's own
/// scripts: right after the `<head>` tag (after a `<meta charset>` that
/// follows it closely, so that the charset stays within a browser's first
/// 1024 bytes), else after the `<html>` tag, else after a doctype, else at
/// the very start. Only the first 64 KiB are searched; bytes that are no
/// UTF-8 are kept as they are.
pub fn inject(html: &[u8], script: &str) -> Vec<u8> {
    let at = insertion_point(html);
    let mut out = Vec::with_capacity(html.len() + script.len());
    out.extend_from_slice(&html[..at]);
    out.extend_from_slice(script.as_bytes());
    out.extend_from_slice(&html[at..]);
    out
}

fn insertion_point(html: &[u8]) -> usize {
    let head = &html[..html.len().min(64 << 10)];
    let lower: Vec<u8> = head.iter().map(u8::to_ascii_lowercase).collect();
    let after_tag = |name: &[u8]| -> Option<usize> {
        let mut from = 0;
        while let Some(i) = find(&lower[from..], name).map(|i| i + from) {
            // `<head>` or `<head ...>`, not `<header>`.
            match lower.get(i + name.len()) {
                Some(b'>') | Some(b' ') | Some(b'\t') | Some(b'\n') | Some(b'\r') | Some(b'/') => {
                    return find(&lower[i..], b">").map(|j| i + j + 1);
                }
                _ => from = i + 1,
            }
        }
        None
    };
    if let Some(at) = after_tag(b"<head") {
        // A `<meta charset=...>` soon after: the script goes after it.
        let near = &lower[at..lower.len().min(at + 1024)];
        let mut from = 0;
        while let Some(m) = find(&near[from..], b"<meta").map(|m| m + from) {
            let Some(e) = find(&near[m..], b">").map(|e| m + e + 1) else {
                break;
            };
            if find(&near[m..e], b"charset").is_some() {
                return at + e;
            }
            from = e;
        }
        return at;
    }
    after_tag(b"<html")
        .or_else(|| after_tag(b"<!doctype"))
        .unwrap_or(0)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(html: &str) -> String {
        String::from_utf8(inject(html.as_bytes(), "<S>")).unwrap()
    }

    #[test]
    fn the_script_goes_first_in_the_head() {
        assert_eq!(
            put("<!DOCTYPE html><html><HEAD lang=x><title>t</title></head></html>"),
            "<!DOCTYPE html><html><HEAD lang=x><S><title>t</title></head></html>"
        );
        assert_eq!(
            put("<html><header>x</header><head>"),
            "<html><header>x</header><head><S>"
        );
        assert_eq!(
            put("<!doctype html><html lang=en><body>"),
            "<!doctype html><html lang=en><S><body>"
        );
        assert_eq!(put("<!doctype html><p>x"), "<!doctype html><S><p>x");
        assert_eq!(put("<p>x</p>"), "<S><p>x</p>");
        assert_eq!(put(""), "<S>");
        assert_eq!(put("<head"), "<S><head");
        // The charset declaration stays first.
        assert_eq!(
            put("<html><head>\n<meta charset=\"utf-8\"><title>t</title>"),
            "<html><head>\n<meta charset=\"utf-8\"><S><title>t</title>"
        );
        assert_eq!(
            put("<head><meta name=viewport content=x><meta charset=utf-8>"),
            "<head><meta name=viewport content=x><meta charset=utf-8><S>"
        );
    }

    #[test]
    fn the_script_names_the_recorded_time_and_keeps_real_timing() {
        let s = script(1_767_323_045_678);
        assert!(s.starts_with("<script>") && s.ends_with("</script>"));
        assert!(s.contains("let now = 1767323045678;"));
        assert!(!s.contains("performance"));
        assert!(s.contains(&format!("let seed = {SEED};")));
    }
}
