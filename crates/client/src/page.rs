//! One client's page load: the HTML, then every subresource it names as soon
//! as it is known (document order), then the `url()`s of its stylesheets,
//! one level deep; and the page metrics with the studies' definitions.

use crate::conn::{FetchError, Fetcher};
use crate::discover::{css_refs, html_refs};
use crate::schedule::Schedule;
use crate::session::{ms, ConnInfo, Object, Settings};
use crate::url::Url;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// The studies' page metrics, from per-object times (seconds since start).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Metrics {
    /// Last object done.
    pub plt_s: f64,
    /// First object after the HTML done (the HTML itself if there is none).
    pub fcp_s: f64,
    /// The largest object done (the first to finish among equally large ones).
    pub lcp_s: f64,
    /// First byte of the HTML.
    pub ttfb_s: f64,
}

/// `objs[0]` is the HTML; the rest are its subresources in any order.
pub fn metrics(objs: &[Object]) -> Option<Metrics> {
    let html = objs.first()?;
    let subs = &objs[1..];
    let plt_s = objs.iter().map(|o| o.done_s).fold(html.done_s, f64::max);
    let fcp_s = subs
        .iter()
        .map(|o| o.done_s)
        .reduce(f64::min)
        .unwrap_or(html.done_s);
    let lcp_s = subs
        .iter()
        .max_by(|a, b| a.bytes.cmp(&b.bytes).then(b.done_s.total_cmp(&a.done_s)))
        .map_or(html.done_s, |o| o.done_s);
    Some(Metrics {
        plt_s,
        fcp_s,
        lcp_s,
        ttfb_s: html.ttfb_s,
    })
}

pub struct PageResult {
    pub client: usize,
    pub url: String,
    pub protocol: &'static str,
    pub objects: Vec<Object>,
    pub connections: Vec<ConnInfo>,
    pub metrics: Option<Metrics>,
    pub invalid: Option<String>,
    pub errors: Vec<String>,
    /// A repeat view's first load (`--repeat-view`).
    pub first_view: Option<Box<PageResult>>,
}

impl PageResult {
    pub fn to_json(&self) -> serde_json::Value {
        let bytes: u64 = self.objects.iter().map(|o| o.bytes).sum();
        let m = self.metrics;
        let first_conn = self.connections.first();
        let html = self.objects.first();
        serde_json::json!({
            "client": self.client, "url": self.url, "protocol": self.protocol,
            "valid": self.invalid.is_none(), "invalid_reason": self.invalid,
            "plt_ms": m.map(|m| ms(m.plt_s)), "fcp_ms": m.map(|m| ms(m.fcp_s)),
            "lcp_ms": m.map(|m| ms(m.lcp_s)), "ttfb_ms": m.map(|m| ms(m.ttfb_s)),
            "bytes": bytes, "objects_n": self.objects.len(),
            "throughput_mbps":
                m.filter(|m| m.plt_s > 0.0).map(|m| bytes as f64 * 8.0 / m.plt_s / 1e6),
            // The first request's phases, cumulative from the start as curl reports them.
            "timeline": {
                "dns_ms": first_conn.and_then(|c| c.dns_s).map(ms),
                "connect_ms": first_conn.and_then(|c| c.connect_s).map(ms),
                "tls_ms": first_conn.and_then(|c| c.tls_s).map(ms),
                "first_byte_ms": html.map(|o| ms(o.ttfb_s)),
                "total_ms": html.map(|o| ms(o.done_s))},
            "connections": self.connections.iter().map(ConnInfo::to_json).collect::<Vec<_>>(),
            "objects": self.objects.iter().map(Object::to_json).collect::<Vec<_>>(),
            "errors": self.errors,
            "first_view": self.first_view.as_ref().map(|f| f.to_json()),
        })
    }
}

/// Load `url` and its subresources within `timeout`; or, if `single` > 0,
/// only `url`, that many times one after another (on the same connection).
pub async fn load(
    settings: Arc<Settings>,
    url: Url,
    single: usize,
    timeout: Duration,
) -> PageResult {
    let client = settings.client;
    let proto = settings.proto;
    let f = Fetcher::new(settings);
    let mut objects: Vec<Object> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    let timed_out = match (single, f.settings().schedule.clone()) {
        (0, Some(s)) => {
            let run = run_schedule(f.clone(), s, &mut objects, &mut errors);
            tokio::time::timeout(timeout, run).await.is_err()
        }
        _ => {
            let run = run_page(f.clone(), url.clone(), single, &mut objects, &mut errors);
            tokio::time::timeout(timeout, run).await.is_err()
        }
    };
    let mut invalid = errors.first().cloned();
    if timed_out {
        invalid = Some(format!(
            "timed out after {} s with {} objects done",
            timeout.as_secs_f64(),
            objects.len()
        ));
    }
    if invalid.is_none() {
        let want = proto.wire_name();
        if let Some(o) = objects.iter().find(|o| o.protocol != want) {
            invalid = Some(format!("{} came over {}, not {want}", o.url, o.protocol));
        } else if let Some(o) = objects.iter().find(|o| o.status >= 400 || o.status < 200) {
            invalid = Some(format!("{} answered HTTP {}", o.url, o.status));
        }
    }
    // Repeated fetches of one URL: the page metrics describe the first.
    let objects_for_metrics = if single > 0 {
        &objects[..objects.len().min(1)]
    } else {
        &objects[..]
    };
    let metrics = if objects_for_metrics
        .first()
        .is_some_and(|o| o.url == url.to_string())
    {
        metrics(objects_for_metrics)
    } else {
        None
    };
    PageResult {
        client,
        url: url.to_string(),
        protocol: proto.wire_name(),
        objects,
        connections: f.connections(),
        metrics,
        invalid,
        errors,
        first_view: None,
    }
}

async fn run_page(
    f: Arc<Fetcher>,
    url: Url,
    single: usize,
    objects: &mut Vec<Object>,
    errors: &mut Vec<String>,
) {
    if single > 0 {
        let mut sink = match f.settings().output.as_ref() {
            Some(p) => match std::fs::File::create(p) {
                Ok(file) => Some(file),
                Err(e) => {
                    errors.push(format!("-o {}: {e}", p.display()));
                    return;
                }
            },
            None => None,
        };
        for _ in 0..single {
            let q = f.now();
            // Only the first body is written.
            match f
                .clone()
                .fetch_into(url.clone(), q, false, sink.take())
                .await
            {
                Ok(o) => objects.push(o),
                Err(e) => {
                    errors.push(e.to_string());
                    return;
                }
            }
        }
        return;
    }
    let html = match f.clone().fetch(url.clone(), 0.0, true).await {
        Ok(o) => o,
        Err(e) => {
            errors.push(e.to_string());
            return;
        }
    };
    let base = url.clone();
    let refs = html
        .body
        .as_deref()
        .map(|b| html_refs(&String::from_utf8_lossy(b)))
        .unwrap_or_default();
    objects.push(html);
    let mut seen: HashSet<String> = HashSet::from([url.to_string()]);
    let mut tasks: JoinSet<(bool, Result<Object, FetchError>)> = JoinSet::new();
    let spawn =
        |tasks: &mut JoinSet<_>, base: &Url, r: &str, parse: bool, seen: &mut HashSet<String>| {
            if let Some(u) = base.join(r) {
                if seen.insert(u.to_string()) {
                    let f = f.clone();
                    let q = f.now();
                    tasks.spawn(async move { (parse, f.fetch(u, q, parse).await) });
                }
            }
        };
    for r in &refs {
        spawn(&mut tasks, &base, r, true, &mut seen);
    }
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok((parse, Ok(mut o))) => {
                if parse {
                    if let Some(body) = o.body.take() {
                        let css_base = Url::parse(&o.url).expect("fetched URLs parse");
                        for r in css_refs(&String::from_utf8_lossy(&body)) {
                            // One level of CSS: what a stylesheet names is fetched, not read.
                            spawn(&mut tasks, &css_base, &r, false, &mut seen);
                        }
                    }
                }
                o.body = None;
                objects.push(o);
            }
            Ok((_, Err(e))) => errors.push(e.to_string()),
            Err(e) => errors.push(format!("fetch task: {e}")),
        }
    }
}

/// A browser's schedule replayed (`schedule.rs`): each request asked for
/// once its `after` response has ended and its delay has passed. Objects go
/// into `objects` as they are done (a load cut short by its timeout keeps
/// them); once all are, they are put in the schedule's order, the page first.
async fn run_schedule(
    f: Arc<Fetcher>,
    s: Arc<Schedule>,
    objects: &mut Vec<Object>,
    errors: &mut Vec<String>,
) {
    let mut index: Vec<usize> = Vec::new();
    let mut tasks: JoinSet<(usize, Result<Object, FetchError>)> = JoinSet::new();
    let spawn = |tasks: &mut JoinSet<_>, i: usize| {
        let (f, r) = (f.clone(), s.requests[i].clone());
        tasks.spawn(async move {
            if r.delay_ms > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(r.delay_ms / 1e3)).await;
            }
            let q = f.now();
            (i, f.fetch(r.url, q, false).await)
        });
    };
    for i in s.roots() {
        spawn(&mut tasks, i);
    }
    let mut failed = 0usize;
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok((i, Ok(o))) => {
                objects.push(o);
                index.push(i);
                for &c in &s.children[i] {
                    spawn(&mut tasks, c);
                }
            }
            Ok((i, Err(e))) => {
                failed += 1;
                errors.push(format!("{e} (schedule request {i})"));
            }
            Err(e) => {
                failed += 1;
                errors.push(format!("fetch task: {e}"));
            }
        }
    }
    let never = s.requests.len() - index.len() - failed;
    if never > 0 {
        errors.push(format!(
            "{never} requests not asked for: a response they wait for failed"
        ));
    }
    let mut done: Vec<(usize, Object)> = index.into_iter().zip(objects.drain(..)).collect();
    done.sort_by_key(|(i, _)| *i);
    objects.extend(done.into_iter().map(|(_, o)| o));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(bytes: u64, ttfb_s: f64, done_s: f64) -> Object {
        Object {
            bytes,
            ttfb_s,
            done_s,
            ..Default::default()
        }
    }

    #[test]
    fn metrics_follow_the_studies_definitions() {
        let objs = [
            o(5_000, 0.5, 0.6),
            o(100_000, 0.7, 2.0),
            o(10_000, 0.7, 0.9),
            o(100_000, 0.8, 1.5),
            o(50, 0.9, 2.5),
        ];
        let m = metrics(&objs).unwrap();
        assert_eq!(
            m,
            Metrics {
                plt_s: 2.5,
                fcp_s: 0.9,
                lcp_s: 1.5,
                ttfb_s: 0.5
            }
        );
        assert!(m.ttfb_s <= m.fcp_s && m.fcp_s <= m.plt_s && m.lcp_s <= m.plt_s);
    }

    #[test]
    fn a_page_without_subresources_is_its_html() {
        let m = metrics(&[o(7, 0.1, 0.2)]).unwrap();
        assert_eq!(
            m,
            Metrics {
                plt_s: 0.2,
                fcp_s: 0.2,
                lcp_s: 0.2,
                ttfb_s: 0.1
            }
        );
        assert!(metrics(&[]).is_none());
    }
}
