//! The little of URLs a page loader needs: split an absolute `http(s)` URL,
//! resolve a reference from a page against it (RFC 3986 section 5.2, without
//! the cases pages do not use), and name its origin.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Url {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`; no fragment.
    pub path: String,
}

#[derive(Debug, PartialEq, Eq)]
pub struct UrlError(pub String);

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Url {
    pub fn parse(s: &str) -> Result<Url, UrlError> {
        let (https, rest) = if let Some(r) = s.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = s.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(UrlError(format!("{s:?}: not an http:// or https:// URL")));
        };
        let rest = rest.split('#').next().unwrap_or("");
        let cut = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(cut);
        if authority.is_empty() || authority.contains('@') {
            return Err(UrlError(format!(
                "{s:?}: no host, or user information (not supported)"
            )));
        }
        let default = if https { 443 } else { 80 };
        let bad_port = |p: &str| UrlError(format!("{s:?}: bad port {p:?}"));
        let (host, port) = if authority.starts_with('[') {
            // An IP literal: "[v6]" or "[v6]:port".
            let close = authority
                .find(']')
                .ok_or_else(|| UrlError(format!("{s:?}: bad host (unclosed '[')")))?;
            let (h, rest) = authority.split_at(close + 1);
            match rest.strip_prefix(':') {
                Some(p) => (h, port_number(p).ok_or_else(|| bad_port(p))?),
                None if rest.is_empty() => (h, default),
                None => return Err(bad_port(rest)),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, port_number(p).ok_or_else(|| bad_port(p))?),
                None => (authority, default),
            }
        };
        if !valid_host(host) {
            return Err(UrlError(format!("{s:?}: bad host {host:?}")));
        }
        let path = if path.is_empty() {
            "/".to_string()
        } else if path.starts_with('?') {
            format!("/{}", escape(path))
        } else {
            escape(path)
        };
        Ok(Url {
            https,
            host: host.to_ascii_lowercase(),
            port,
            path,
        })
    }

    /// `host:port` as the `Host` header and HTTP/2-3 `:authority` write it.
    pub fn authority(&self) -> String {
        let default = if self.https { 443 } else { 80 };
        if self.port == default {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    pub fn origin(&self) -> (bool, String, u16) {
        (self.https, self.host.clone(), self.port)
    }

    /// Resolve `reference` (as written in an HTML attribute or CSS `url()`)
    /// against this URL. `None` for references that are not fetched over
    /// HTTP: `data:`, `javascript:`, `mailto:`, fragments and empty ones.
    pub fn join(&self, reference: &str) -> Option<Url> {
        let r = reference.trim();
        let r = r.split('#').next().unwrap_or("");
        if r.is_empty() {
            return None;
        }
        let lower = r.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            return Url::parse(r).ok();
        }
        if let Some(rest) = r.strip_prefix("//") {
            let scheme = if self.https { "https://" } else { "http://" };
            return Url::parse(&format!("{scheme}{rest}")).ok();
        }
        if let Some(colon) = r.find(':') {
            // A scheme (letters before the first colon, before any slash): not ours.
            if r[..colon]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            {
                return None;
            }
        }
        let (r_path, r_query) = match r.find('?') {
            Some(i) => (&r[..i], Some(&r[i..])),
            None => (r, None),
        };
        let base_path = self.path.split('?').next().unwrap_or("/");
        let merged = if r_path.is_empty() {
            base_path.to_string()
        } else if r_path.starts_with('/') {
            r_path.to_string()
        } else {
            let dir = &base_path[..base_path.rfind('/').map_or(0, |i| i + 1)];
            format!("{dir}{r_path}")
        };
        let mut path = remove_dot_segments(&merged);
        if let Some(q) = r_query {
            path.push_str(q);
        } else if r_path.is_empty() {
            if let Some(i) = self.path.find('?') {
                path.push_str(&self.path[i..]);
            }
        }
        let path = escape(&path);
        Some(Url {
            path,
            ..self.clone()
        })
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}{}",
            if self.https { "https" } else { "http" },
            self.authority(),
            self.path
        )
    }
}

/// A port: 1 to 5 decimal digits (no sign), at most 65535.
fn port_number(p: &str) -> Option<u16> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    p.parse().ok()
}

/// A host as RFC 3986 writes one: a registered name (letters, digits,
/// `-._~`, sub-delimiters, percent escapes) or an IP literal in brackets.
fn valid_host(h: &str) -> bool {
    if let Some(inner) = h.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return !inner.is_empty()
            && inner
                .bytes()
                .all(|c| c.is_ascii_hexdigit() || c == b':' || c == b'.');
    }
    !h.is_empty()
        && h.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%".contains(&c))
}

/// Percent-encode what a request target cannot carry raw (spaces, control
/// characters, non-ASCII bytes of UTF-8, `"<>\^`{|}`), as browsers do
/// before they request a reference; `%` is left alone, so that escaping
/// twice changes nothing.
fn escape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.bytes() {
        if c.is_ascii_graphic() && !b"\"<>\\^`{|}".contains(&c) {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segs: Vec<&str> = path.split('/').collect();
    for (i, s) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        match *s {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let j = out.join("/");
    if j.starts_with('/') {
        j
    } else {
        format!("/{j}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn parses_authority_port_and_path() {
        let x = u("https://Server1.test:8443/a/b?q=1#frag");
        assert_eq!(
            (x.https, x.host.as_str(), x.port, x.path.as_str()),
            (true, "server1.test", 8443, "/a/b?q=1")
        );
        assert_eq!(u("http://h").path, "/");
        assert_eq!(u("http://h").port, 80);
        assert_eq!(u("https://h?x").path, "/?x");
        assert_eq!(u("https://h:443/").authority(), "h");
        assert_eq!(u("https://h:444/").authority(), "h:444");
        assert!(Url::parse("ftp://h/").is_err());
        assert!(Url::parse("https://h:99999/").is_err());
        assert!(Url::parse("https:///x").is_err());
    }

    #[test]
    fn resolves_references_like_rfc3986() {
        let base = u("https://s.test/pages/shop/index.html?v=2");
        let j = |r: &str| base.join(r).map(|x| x.to_string());
        assert_eq!(
            j("img/a.jpg").as_deref(),
            Some("https://s.test/pages/shop/img/a.jpg")
        );
        assert_eq!(
            j("./img/a.jpg").as_deref(),
            Some("https://s.test/pages/shop/img/a.jpg")
        );
        assert_eq!(
            j("../fonts/f.ttf").as_deref(),
            Some("https://s.test/pages/fonts/f.ttf")
        );
        assert_eq!(j("../../../x").as_deref(), Some("https://s.test/x"));
        assert_eq!(j("/abs.css").as_deref(), Some("https://s.test/abs.css"));
        assert_eq!(
            j("//other.test/y.js").as_deref(),
            Some("https://other.test/y.js")
        );
        assert_eq!(
            j("http://other.test:8080/z").as_deref(),
            Some("http://other.test:8080/z")
        );
        assert_eq!(
            j("a.css?x=1#f").as_deref(),
            Some("https://s.test/pages/shop/a.css?x=1")
        );
        assert_eq!(
            j("?only").as_deref(),
            Some("https://s.test/pages/shop/index.html?only")
        );
        assert_eq!(j("data:image/png;base64,AAA"), None);
        assert_eq!(j("javascript:void(0)"), None);
        assert_eq!(j("#top"), None);
        assert_eq!(j("  "), None);
    }

    /// Found by the `url`, `html` and `css` fuzz targets: URLs that did not
    /// survive `Display` and `parse` (the loader re-parses fetched URLs and
    /// panicked on those), and paths hyper refuses to send.
    #[test]
    fn fuzz_regressions() {
        let base = u("https://s.test/pages/shop/index.html?v=2");
        let j = |r: &str| base.join(r).map(|x| x.to_string());
        // Spaces, non-ASCII and <"> are escaped as browsers do; % is kept.
        assert_eq!(
            j("a b/\u{e9}<x>.jpg?q=\"1\" 2").as_deref(),
            Some("https://s.test/pages/shop/a%20b/%C3%A9%3Cx%3E.jpg?q=%221%22%202")
        );
        assert_eq!(
            j("100%25.txt").as_deref(),
            Some("https://s.test/pages/shop/100%25.txt")
        );
        assert_eq!(u("https://s.test/paf/\u{80} x").path, "/paf/%C2%80%20x");
        // Hosts a URL cannot have: empty, with a colon, with spaces.
        for bad in [
            "http://:80/",
            "http://a:b:80/x",
            "http://a b/",
            "https://[::1/",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(j("//a:b:80/x"), None);
        // Ports are digits only.
        assert!(Url::parse("http://h:+81/").is_err());
        assert!(Url::parse("http://h:/").is_err());
        // IPv6 literals with and without a port.
        assert_eq!(
            (u("https://[::1]/").host.as_str(), u("https://[::1]/").port),
            ("[::1]", 443)
        );
        assert_eq!(u("https://[::1]:8443/x").port, 8443);
        for s in [
            "https://[::1]/",
            "https://[::1]:8443/x",
            "http://h:81/a%20b?c",
        ] {
            assert_eq!(u(&u(s).to_string()), u(s), "{s}");
        }
    }
}
