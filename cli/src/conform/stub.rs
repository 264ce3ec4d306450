//! Stub workers for proxying routers (SPEC.md §16.4): HTTP servers on 127.0.0.1 that
//! answer `GET` at once, record the path and body of every `POST`, and answer it with a
//! one-token OpenAI completion — or, while the fleet holds, keep it open until the
//! fleet is released, so that a load request stays in flight at its worker.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What every stub of a fleet shares.
#[derive(Default)]
struct Shared {
    /// `(worker index, path, body)` of every POST, in arrival order.
    posts: Mutex<Vec<(usize, String, String)>>,
    hold: AtomicBool,
    released: AtomicBool,
    stopped: AtomicBool,
}

/// A fleet of stub workers, stopped and released when dropped.
pub struct Fleet {
    pub ports: Vec<u16>,
    shared: Arc<Shared>,
}

impl Fleet {
    /// `n` stubs, each on a port of its own; a held request is kept open at most
    /// `hold_limit`.
    pub fn start(n: usize, hold_limit: Duration) -> Result<Fleet, String> {
        let shared = Arc::new(Shared::default());
        let mut ports = Vec::new();
        for index in 0..n {
            let listener =
                TcpListener::bind("127.0.0.1:0").map_err(|e| format!("stub worker: {e}"))?;
            ports.push(listener.local_addr().map_err(|e| e.to_string())?.port());
            let shared = shared.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if shared.stopped.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        let shared = shared.clone();
                        std::thread::spawn(move || serve(index, stream, &shared, hold_limit));
                    }
                }
            });
        }
        Ok(Fleet { ports, shared })
    }

    /// From now on POSTs are held open (`true`) or answered at once (`false`).
    pub fn hold(&self, hold: bool) {
        self.shared.hold.store(hold, Ordering::SeqCst);
    }

    /// The POSTs received so far: `(worker index, path, body)`.
    pub fn posts(&self) -> Vec<(usize, String, String)> {
        self.shared
            .posts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The URL of stub `i`.
    pub fn url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[i])
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.shared.released.store(true, Ordering::SeqCst);
        self.shared.stopped.store(true, Ordering::SeqCst);
        // Each accept loop wakes on one more connection and sees `stopped`.
        for port in &self.ports {
            let _ = TcpStream::connect(("127.0.0.1", *port));
        }
    }
}

/// One connection: one request, one answer.
fn serve(index: usize, stream: TcpStream, shared: &Shared, hold_limit: Duration) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("").to_string(),
    );
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length.min(16 << 20)];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let answer = if method == "POST" {
        shared
            .posts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((
                index,
                path.clone(),
                String::from_utf8_lossy(&body).into_owned(),
            ));
        if shared.hold.load(Ordering::SeqCst) {
            let until = Instant::now() + hold_limit;
            while !shared.released.load(Ordering::SeqCst) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        r#"{"id":"kvroute-stub","object":"text_completion","model":"m","choices":[{"index":0,"text":"ok","finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#
    } else if path.starts_with("/v1/models") {
        r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#
    } else {
        "{}"
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    );
}

#[cfg(test)]
mod tests {
    use super::super::http;
    use super::*;

    #[test]
    fn a_stub_answers_health_and_records_posts() {
        let fleet = Fleet::start(2, Duration::from_secs(5)).unwrap();
        let timeout = Duration::from_secs(5);
        assert_eq!(
            http::exchange("GET", fleet.ports[0], "/health", None, timeout)
                .unwrap()
                .0,
            200
        );
        let body = serde_json::json!({"prompt": [1, 2]});
        http::json(
            "POST",
            fleet.ports[1],
            "/v1/completions",
            Some(&body),
            timeout,
        )
        .unwrap();
        let posts = fleet.posts();
        assert_eq!(posts.len(), 1);
        assert_eq!((posts[0].0, posts[0].1.as_str()), (1, "/v1/completions"));
        assert!(posts[0].2.contains("[1,2]"));
    }

    #[test]
    fn a_held_request_is_recorded_at_once_and_answered_on_release() {
        let fleet = Fleet::start(1, Duration::from_secs(20)).unwrap();
        fleet.hold(true);
        let port = fleet.ports[0];
        let held = std::thread::spawn(move || {
            http::exchange(
                "POST",
                port,
                "/v1/completions",
                Some(&serde_json::json!({})),
                Duration::from_secs(30),
            )
        });
        assert!(super::super::supervise::wait_until(
            Duration::from_secs(5),
            || fleet.posts().len() == 1
        ));
        assert!(!held.is_finished());
        let started = Instant::now();
        drop(fleet);
        assert_eq!(held.join().unwrap().unwrap().0, 200);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
