//! A minimal HTTP/1.0 client for loopback: the routers' APIs answer small JSON bodies,
//! and HTTP/1.0 with `Connection: close` needs neither chunked decoding nor pooling.
//! Every connect, write and read is bounded by the timeout.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The status and body of one exchange with `127.0.0.1:port`.
pub fn exchange(
    method: &str,
    port: u16,
    path: &str,
    body: Option<&serde_json::Value>,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let what = |e: std::io::Error| format!("{method} {path} on port {port}: {e}");
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(what)?;
    stream.set_read_timeout(Some(timeout)).map_err(what)?;
    stream.set_write_timeout(Some(timeout)).map_err(what)?;
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut request =
        format!("{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    if body.is_some() {
        request += &format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            payload.len()
        );
    }
    request += "\r\n";
    request += &payload;
    stream.write_all(request.as_bytes()).map_err(what)?;
    let mut response = Vec::new();
    stream
        .take(16 << 20)
        .read_to_end(&mut response)
        .map_err(what)?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or(format!("{method} {path}: no HTTP answer"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(format!("{method} {path}: no status in {head:?}"))?;
    Ok((status, body.to_string()))
}

/// `exchange` that wants a 2xx JSON answer.
pub fn json(
    method: &str,
    port: u16,
    path: &str,
    body: Option<&serde_json::Value>,
    timeout: Duration,
) -> Result<serde_json::Value, String> {
    let (status, text) = exchange(method, port, path, body, timeout)?;
    if !(200..300).contains(&status) {
        return Err(format!("{method} {path}: status {status}: {}", text.trim()));
    }
    serde_json::from_str(&text)
        .map_err(|e| format!("{method} {path}: not JSON ({e}): {}", text.trim()))
}
