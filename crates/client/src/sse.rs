//! A Server-Sent Events parser (the WHATWG event-stream format), sans-IO:
//! bytes in as they arrive, in chunks of any size; whole events out. Lines
//! end in LF, CR LF or CR; `event:` names an event (default `message`),
//! `data:` lines are joined with LF, `:` lines are comments, and a blank
//! line dispatches the event (none if it had no data). `id:` and `retry:`
//! are read and ignored: the loader never reconnects.

/// The longest line kept (a message of the server's largest size and then some).
pub const MAX_LINE: usize = (1 << 20) + 4096;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `message` unless the stream named another.
    pub kind: String,
    pub data: String,
}

/// Why a stream cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("an event-stream line longer than {MAX_LINE} bytes")]
    LineTooLong,
    #[error("an event-stream line that is not UTF-8")]
    NotUtf8,
}

/// The parser's state between chunks.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The last chunk ended in CR: an LF first in the next belongs to it.
    after_cr: bool,
    kind: Option<String>,
    data: Option<String>,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Take a chunk; push every event it completes onto `out`.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<Event>) -> Result<(), SseError> {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(i) = bytes.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.push(&bytes[..i])?;
            let cr = bytes[i] == b'\r';
            bytes = &bytes[i + 1..];
            if cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            self.line(&line, out)?;
        }
        self.push(bytes)
    }

    fn push(&mut self, part: &[u8]) -> Result<(), SseError> {
        if self.line.len() + part.len() > MAX_LINE {
            return Err(SseError::LineTooLong);
        }
        self.line.extend_from_slice(part);
        Ok(())
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<Event>) -> Result<(), SseError> {
        if line.is_empty() {
            let kind = self.kind.take();
            if let Some(data) = self.data.take() {
                out.push(Event {
                    kind: kind.unwrap_or_else(|| "message".into()),
                    data,
                });
            }
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.kind = Some(value.into()),
            "data" => match self.data.as_mut() {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.into()),
            },
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]]) -> Vec<Event> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut out).unwrap();
        }
        out
    }

    fn ev(kind: &str, data: &str) -> Event {
        Event {
            kind: kind.into(),
            data: data.into(),
        }
    }

    #[test]
    fn events_as_the_server_writes_them() {
        let s: &[u8] =
            b"event: hello\ndata: {\"t_ms\":1.5}\n\nid: 0\ndata: {\"seq\":0}\n\n: c\n\nevent: done\ndata: {}\n\n";
        let want = vec![
            ev("hello", "{\"t_ms\":1.5}"),
            ev("message", "{\"seq\":0}"),
            ev("done", "{}"),
        ];
        assert_eq!(parse(&[s]), want);
        // Byte by byte, the same events.
        let bytes: Vec<&[u8]> = s.chunks(1).collect();
        assert_eq!(parse(&bytes), want);
    }

    #[test]
    fn line_endings_data_lines_and_no_data() {
        assert_eq!(
            parse(&[b"data:a\r\ndata: b\r", b"\n\r", b"event: x\n\n"]),
            vec![ev("message", "a\nb")]
        );
        assert_eq!(parse(&[b"data\n\n"]), vec![ev("message", "")]);
        assert_eq!(parse(&[b"data: x"]), vec![]); // no blank line yet: nothing dispatched
    }

    #[test]
    fn long_lines_and_bad_bytes_are_refused() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        assert_eq!(
            p.feed(&vec![b'a'; MAX_LINE + 1], &mut out),
            Err(SseError::LineTooLong)
        );
        assert_eq!(
            SseParser::new().feed(b"data: \xff\n", &mut out),
            Err(SseError::NotUtf8)
        );
    }
}
