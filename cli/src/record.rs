//! `kvroute record`: subscribe to engines' KV event publishers and write a capture
//! (SPEC.md §13.2, §13.6).
//!
//! One SUB socket per endpoint, each subscribed to every topic, so that every message
//! is known by the endpoint it came from (a single socket fair-queues its peers and
//! does not say which one sent a message). The sockets run as tasks of one
//! single-threaded runtime and hand their messages to the writer over a channel in the
//! order they arrive. The capture is written through the output rules of [`crate::out`]:
//! a temporary file renamed into place when recording stops, by count, by time or by
//! SIGINT/SIGTERM, so a reader never sees half a line.

use crate::failure::Failure;
use crate::out;
use base64::Engine as _;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};
use zeromq::{Socket, SocketRecv};

/// How often the writer looks for a stop signal or the deadline while no message
/// arrives: short enough that Ctrl-C feels immediate.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// What to record, and when to stop.
pub struct RecordArgs<'a> {
    pub endpoints: &'a [String],
    pub out: &'a Path,
    pub count: Option<u64>,
    pub seconds: Option<u64>,
}

/// What one socket task hands the writer.
enum Received {
    Message(usize, zeromq::ZmqMessage),
    Failed(usize, zeromq::ZmqError),
}

/// Records until a stop condition, then renames the capture into place.
pub fn record(args: &RecordArgs) -> Result<(), Failure> {
    out::stop_on_signal();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::other(format!("kvroute record: cannot start: {e}")))?;
    let mut tally = Tally::default();
    let mut failure = None;
    let written = out::write_file(args.out, |w| {
        runtime.block_on(receive(args, w, &mut tally)).map_err(|f| {
            failure = Some(f);
            std::io::Error::other("recording failed")
        })
    });
    if let Some(failure) = failure {
        return Err(failure);
    }
    written?;
    let skipped = match tally.malformed {
        0 => String::new(),
        n => format!(", {n} malformed messages skipped"),
    };
    crate::out::note(&format!(
        "recorded {} messages from {} endpoints -> {}{skipped}",
        tally.written,
        args.endpoints.len(),
        args.out.display()
    ));
    Ok(())
}

#[derive(Default)]
struct Tally {
    written: u64,
    malformed: u64,
}

async fn receive(
    args: &RecordArgs<'_>,
    w: &mut dyn Write,
    tally: &mut Tally,
) -> Result<(), Failure> {
    let (sender, mut receiver) = tokio::sync::mpsc::channel(1024);
    for (index, endpoint) in args.endpoints.iter().enumerate() {
        tokio::spawn(subscribe(index, endpoint.clone(), sender.clone()));
    }
    let deadline = args
        .seconds
        .map(|s| Instant::now() + Duration::from_secs(s));
    loop {
        let counted_out = args.count.is_some_and(|n| tally.written >= n);
        let timed_out = deadline.is_some_and(|d| Instant::now() >= d);
        if counted_out || timed_out || out::stop_signal().is_some() {
            break;
        }
        let received = match tokio::time::timeout(POLL_INTERVAL, receiver.recv()).await {
            Ok(Some(received)) => received,
            Ok(None) | Err(_) => continue,
        };
        match received {
            Received::Message(index, message) => {
                match capture_line(&args.endpoints[index], message) {
                    Some(line) => {
                        writeln!(w, "{line}").map_err(|e| write_failure(args.out, &e))?;
                        tally.written += 1;
                    }
                    None => tally.malformed += 1,
                }
            }
            Received::Failed(index, error) => {
                return Err(Failure::invalid(vec![format!(
                    "{}: cannot subscribe: {error}",
                    args.endpoints[index]
                )]));
            }
        }
    }
    Ok(())
}

fn write_failure(out: &Path, error: &std::io::Error) -> Failure {
    Failure::other(format!("{}: cannot write: {error}", out.display()))
}

/// One endpoint's socket: connects (retrying until the publisher is up), then hands
/// on every message until the writer goes away.
async fn subscribe(index: usize, endpoint: String, sender: tokio::sync::mpsc::Sender<Received>) {
    let mut socket = zeromq::SubSocket::new();
    let connected = async {
        socket.subscribe("").await?;
        socket.connect(&endpoint).await
    };
    if let Err(error) = connected.await {
        let _ = sender.send(Received::Failed(index, error)).await;
        return;
    }
    loop {
        let received = match socket.recv().await {
            Ok(message) => Received::Message(index, message),
            Err(error) => Received::Failed(index, error),
        };
        let failed = matches!(received, Received::Failed(..));
        if sender.send(received).await.is_err() || failed {
            return;
        }
    }
}

/// The capture line of a message of three frames with an 8-byte sequence frame, as
/// canonical JSON (members in byte order); `None` for any other message.
fn capture_line(endpoint: &str, message: zeromq::ZmqMessage) -> Option<String> {
    let frames = message.into_vec();
    let [topic, seq, payload] = frames.as_slice() else {
        return None;
    };
    let seq = u64::from_be_bytes(seq.as_ref().try_into().ok()?);
    let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut line = serde_json::Map::new();
    line.insert("endpoint".into(), endpoint.into());
    match std::str::from_utf8(topic) {
        Ok(text) => line.insert("topic".into(), text.into()),
        Err(_) => line.insert("topic_b64".into(), base64(topic).into()),
    };
    line.insert("seq".into(), seq.into());
    line.insert("payload_b64".into(), base64(payload).into());
    Some(serde_json::Value::Object(line).to_string())
}
