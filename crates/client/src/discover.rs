//! Subresource discovery with a browser's first pass: `img src`, `script
//! src`, `link rel=stylesheet href` (and `rel=preload`, `rel=icon` are left
//! out, as a fresh page load would not wait on them) in HTML, and `url(...)`
//! and `@import "..."` in CSS. Not an HTML parser: a tag scanner that skips
//! comments, which is what test pages need and what is easy to check.

/// References in an HTML document, in document order, as written.
pub fn html_refs(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lower = html.to_ascii_lowercase();
    let b = lower.as_bytes();
    let mut i = 0;
    while let Some(off) = lower[i..].find('<') {
        let start = i + off;
        if lower[start..].starts_with("<!--") {
            i = lower[start..]
                .find("-->")
                .map_or(lower.len(), |e| start + e + 3);
            continue;
        }
        let name_end = lower[start + 1..]
            .find(|c: char| !(c.is_ascii_alphanumeric()))
            .map_or(lower.len(), |e| start + 1 + e);
        let name = &lower[start + 1..name_end];
        let end = tag_end(b, name_end);
        let attrs = attributes(&html[name_end..end]);
        let get = |k: &str| attrs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        match name {
            "img" | "script" => {
                if let Some(v) = get("src") {
                    out.push(v);
                }
            }
            "link" => {
                let rel = get("rel").unwrap_or_default().to_ascii_lowercase();
                if rel.split_ascii_whitespace().any(|r| r == "stylesheet") {
                    if let Some(v) = get("href") {
                        out.push(v);
                    }
                }
            }
            "style" => {
                // Inline CSS: its url()s load like a stylesheet's.
                let close = lower[end..]
                    .find("</style")
                    .map_or(lower.len(), |e| end + e);
                out.extend(css_refs(&html[end..close]));
            }
            _ => {}
        }
        if name == "script" || name == "style" {
            // Skip the element's text: a '<' in a script is not a tag.
            let close = format!("</{name}");
            i = lower[end..].find(&close).map_or(lower.len(), |e| end + e);
        } else {
            i = end.max(start + 1);
        }
    }
    out
}

/// The index just past the `>` that ends a tag, honouring quoted values.
fn tag_end(b: &[u8], mut i: usize) -> usize {
    let mut quote: Option<u8> = None;
    while i < b.len() {
        match (quote, b[i]) {
            (None, b'"') | (None, b'\'') => quote = Some(b[i]),
            (Some(q), c) if c == q => quote = None,
            (None, b'>') => return i + 1,
            _ => {}
        }
        i += 1;
    }
    b.len()
}

/// Attribute names (lower-cased) and values (entity `&amp;` decoded) of a tag's inside.
fn attributes(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let c: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < c.len() {
        while i < c.len() && (c[i].is_whitespace() || c[i] == '/' || c[i] == '>') {
            i += 1;
        }
        let ns = i;
        while i < c.len() && !c[i].is_whitespace() && !"=/>".contains(c[i]) {
            i += 1;
        }
        if ns == i {
            i += 1;
            continue;
        }
        let name: String = c[ns..i].iter().collect::<String>().to_ascii_lowercase();
        while i < c.len() && c[i].is_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < c.len() && c[i] == '=' {
            i += 1;
            while i < c.len() && c[i].is_whitespace() {
                i += 1;
            }
            if i < c.len() && (c[i] == '"' || c[i] == '\'') {
                let q = c[i];
                i += 1;
                let vs = i;
                while i < c.len() && c[i] != q {
                    i += 1;
                }
                value = c[vs..i.min(c.len())].iter().collect();
                i += 1;
            } else {
                let vs = i;
                while i < c.len() && !c[i].is_whitespace() && c[i] != '>' {
                    i += 1;
                }
                value = c[vs..i].iter().collect();
            }
        }
        out.push((name, value.replace("&amp;", "&")));
    }
    out
}

/// References in a stylesheet: `url(...)` (quoted or not) and `@import "..."`.
pub fn css_refs(css: &str) -> Vec<String> {
    let mut out = Vec::new();
    let css = strip_css_comments(css);
    let lower = css.to_ascii_lowercase();
    let mut i = 0;
    while let Some(off) = lower[i..].find("url(") {
        let s = i + off + 4;
        let e = lower[s..].find(')').map_or(lower.len(), |e| s + e);
        let v = css[s..e]
            .trim()
            .trim_matches(|c| c == '"' || c == '\'')
            .trim();
        if !v.is_empty() {
            out.push(v.to_string());
        }
        i = e;
    }
    let mut i = 0;
    while let Some(off) = lower[i..].find("@import") {
        let s = i + off + 7;
        let rest = css[s..].trim_start();
        if let Some(q) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') {
            if let Some(e) = rest[1..].find(q) {
                out.push(rest[1..1 + e].to_string());
            }
        }
        i = s;
    }
    out
}

fn strip_css_comments(css: &str) -> String {
    let mut out = String::with_capacity(css.len());
    let mut rest = css;
    while let Some(s) = rest.find("/*") {
        out.push_str(&rest[..s]);
        rest = rest[s + 2..]
            .find("*/")
            .map_or("", |e| &rest[s + 2 + e + 2..]);
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_images_scripts_and_stylesheets_in_order() {
        let html = r#"<!doctype html><html><head>
            <link rel="stylesheet" href="css/main.css"><link rel=icon href="fav.ico">
            <link REL="preload stylesheet" HREF='b.css'>
            <script src="js/app.js" defer></script>
            <script>if (a<b) { document.write('<img src="no.jpg">') }</script>
            <style>.x{background:url("bg.png")}</style>
            </head><body><!-- <img src="commented.jpg"> -->
            <IMG alt="a > b" src=one.jpg width=10><img src="two.jpg?x=1&amp;y=2"/>
            <img data-src="lazy.jpg"><a href="page2.html">x</a></body></html>"#;
        assert_eq!(
            html_refs(html),
            [
                "css/main.css",
                "b.css",
                "js/app.js",
                "bg.png",
                "one.jpg",
                "two.jpg?x=1&y=2"
            ]
        );
    }

    #[test]
    fn finds_css_urls_and_imports() {
        let css = "@import url(theme.css);\n@import 'print.css' print;\n/* url(gone.png) */\n\
                   @font-face{src:url( ../fonts/shop.ttf ) format('truetype')}\n\
                   .h{background:url('p.jpg')}";
        assert_eq!(
            css_refs(css),
            ["theme.css", "../fonts/shop.ttf", "p.jpg", "print.css"]
        );
        assert!(css_refs("body{color:red}").is_empty());
    }

    #[test]
    fn survives_truncated_markup() {
        assert_eq!(html_refs("<img src=\"a.jpg"), ["a.jpg"]);
        assert!(html_refs("<").is_empty());
        assert!(html_refs("<!-- never closed <img src=x>").is_empty());
        assert_eq!(css_refs("url(unclosed"), ["unclosed"]);
    }
}
