//! `kvroute record`: subscribe to engines' KV event publishers and write a capture
//! (SPEC.md §13.2, §13.6), asking a publisher's replay socket for what a sequence gap
//! lost.
//!
//! One SUB socket per endpoint, each subscribed to every topic, so that every message
//! is known by the endpoint it came from (a single socket fair-queues its peers and
//! does not say which one sent a message). The sockets run as tasks of one
//! single-threaded runtime and hand their messages to the writer over a channel in the
//! order they arrive. The capture is written through the output rules of [`crate::out`]:
//! a temporary file renamed into place when recording stops, by count, by time or by
//! SIGINT/SIGTERM, so a reader never sees half a line.
//!
//! A gap on an endpoint paired with a replay socket (`--replay ENDPOINT=REPLAY`) opens a
//! replay: a DEALER task asks for the first missing number while that endpoint's live
//! messages are held; when the answer ends (or its wait is up) the held messages are
//! written with the answers that fill the holes before them, so the capture holds each
//! publisher's messages in sequence order and no number twice.

use crate::failure::Failure;
use crate::out;
use base64::Engine as _;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zeromq::{Socket, SocketRecv, SocketSend};

/// How often the writer looks for a stop signal or the deadline while no message
/// arrives: short enough that Ctrl-C feels immediate.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The most messages one replay holds and keeps answered, together: reached, the
/// replay ends (SPEC.md §13.6), so memory stays bounded whatever a publisher sends.
/// Ten times vLLM's default replay buffer of 10,000.
const REPLAY_MESSAGES_MAX: usize = 100_000;

/// The sequence frame of a replay socket's end marker: -1 as 8 bytes big-endian two's
/// complement (vLLM and SGLang `ZmqEventPublisher.END_SEQ`).
const END_SEQ: [u8; 8] = [0xFF; 8];

/// The largest topic and payload frames together a message may have to be written:
/// the largest payload `import vllm-events` decodes (SPEC.md §13.6), so that no line
/// of a capture is one its import refuses.
const MESSAGE_BYTES_MAX: usize = kvroute_core::import::PAYLOAD_BYTES_MAX;

/// The longest capture line written, its newline included: the import's cap.
const LINE_BYTES_MAX: usize = kvroute_core::import::ENGINE_EVENTS_LINE_BYTES_MAX;

/// How long an endpoint may stay silent before record asks whether an engine publishes
/// there: longer than a connection takes, shorter than a user waits wondering.
const SILENCE_WARNING: Duration = Duration::from_secs(5);

/// Panics anywhere in the process, counted by [`count_panics`]'s hook.
static PANICS: AtomicU64 = AtomicU64::new(0);

/// What to record, and when to stop.
pub struct RecordArgs<'a> {
    pub endpoints: &'a [String],
    pub out: &'a Path,
    pub count: Option<u64>,
    pub seconds: Option<u64>,
    /// `ENDPOINT=REPLAY` pairs, as given.
    pub replay: &'a [String],
    pub replay_wait_ms: u64,
}

/// What the socket tasks hand the writer.
enum Received {
    /// The SUB socket of endpoint `usize` reached its publisher.
    Connected(usize),
    Message(usize, zeromq::ZmqMessage),
    Failed(usize, zeromq::ZmqError),
    /// One message of a replay socket's answer to request `request` of endpoint `usize`,
    /// the end marker included.
    Answer(usize, u64, zeromq::ZmqMessage),
    /// The replay task is done: the end marker came, the wait is up, or the replay
    /// socket failed.
    AnswerEnded(usize, u64),
}

/// One ZeroMQ message as the capture keeps it.
struct Frames {
    topic: Vec<u8>,
    seq: u64,
    payload: Vec<u8>,
}

/// An answer of a replay socket: its topic, when the answer had one (§13.1).
struct Answer {
    topic: Option<Vec<u8>>,
    payload: Vec<u8>,
}

/// One endpoint's state between the sockets and the capture.
#[derive(Default)]
struct Stream {
    replay_endpoint: Option<String>,
    /// Whether the SUB socket reached the publisher, and whether any message came.
    connected: bool,
    heard: bool,
    /// Whether the user was told that nothing came.
    warned_silent: bool,
    /// The sequence number of the last line written from this endpoint.
    last_seq: Option<u64>,
    /// The open replay's request number, when one is open.
    open_replay: Option<u64>,
    requests: u64,
    /// Live messages received while a replay is open, in the order received.
    held: Vec<Frames>,
    /// The open replay's answers by sequence number, each number once.
    answers: BTreeMap<u64, Answer>,
}

/// Records until a stop condition, then renames the capture into place.
pub fn record(args: &RecordArgs) -> Result<(), Failure> {
    let streams = streams(args)?;
    count_panics();
    out::stop_on_signal();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::other(format!("kvroute record: cannot start: {e}")))?;
    let mut tally = Tally::default();
    let mut failure = None;
    let progress = crate::progress::Progress::start("record", "connecting");
    let written = out::write_file(args.out, |w| {
        let mut counted = progress.counting(w);
        let mut capture = Capture {
            w: &mut counted,
            out: args.out,
            count: args.count,
            tally: &mut tally,
        };
        runtime
            .block_on(receive(args, streams, &mut capture, &progress))
            .map_err(|f| {
                failure = Some(f);
                std::io::Error::other("recording failed")
            })
    });
    progress.finish();
    if let Some(failure) = failure {
        return Err(failure);
    }
    written?;
    let skipped = match tally.malformed {
        0 => String::new(),
        n => format!(", {n} malformed messages skipped"),
    };
    let replayed = match args.replay.is_empty() {
        true => String::new(),
        false => format!(
            ", {} messages replayed, {} of {} gaps not filled",
            tally.replayed, tally.gaps_unfilled, tally.gaps
        ),
    };
    crate::out::note(&format!(
        "recorded {} messages from {} endpoints -> {}{skipped}{replayed}",
        tally.written,
        args.endpoints.len(),
        args.out.display()
    ));
    Ok(())
}

/// Counts every panic from now on, after the message the previous hook prints. A
/// panic in a socket task (ours or one the ZeroMQ crate spawns) ends only that task,
/// which would leave the recording waiting on a socket that is gone and exiting 0
/// with what it never received; the writer fails the recording instead.
fn count_panics() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

/// An endpoint as a socket connects to it, so that two spellings of one address are
/// one (a host name's case, a port's leading zeros, an IPv6 address's forms, a path's
/// repeated separators), or why `record` cannot connect to it.
fn connect_address(endpoint: &str) -> Result<zeromq::Endpoint, String> {
    let quoted = kvroute_core::output::quote_str(endpoint);
    let parsed = endpoint.parse::<zeromq::Endpoint>().map_err(|error| {
        format!("{quoted} is no ZeroMQ address: {error} (record connects to tcp://HOST:PORT or ipc://PATH)")
    })?;
    match parsed {
        zeromq::Endpoint::Tcp(zeromq::Host::Domain(name), _) if name == "*" => Err(format!(
            "{quoted} is an address to bind, not to connect to: name the engine's host, \
             such as tcp://127.0.0.1:5557"
        )),
        zeromq::Endpoint::Tcp(zeromq::Host::Domain(name), port) => Ok(zeromq::Endpoint::Tcp(
            zeromq::Host::Domain(name.to_ascii_lowercase()),
            port,
        )),
        other => Ok(other),
    }
}

/// Each endpoint's connect address, refusing one given twice: its messages would be
/// recorded twice, and the import would take each repeat for an engine restart.
fn connect_addresses(endpoints: &[String]) -> Result<Vec<zeromq::Endpoint>, Failure> {
    let mut addresses: Vec<zeromq::Endpoint> = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        let address = connect_address(endpoint).map_err(|e| Failure::invalid(vec![e]))?;
        if let Some(first) = addresses.iter().position(|a| *a == address) {
            return Err(Failure::invalid(vec![format!(
                "{} and {} are one endpoint: each message would be recorded twice",
                kvroute_core::output::quote_str(&endpoints[first]),
                kvroute_core::output::quote_str(endpoint)
            )]));
        }
        addresses.push(address);
    }
    Ok(addresses)
}

/// Each endpoint's stream, with the replay socket `--replay` pairs it with; every
/// address is checked here, before any socket starts.
fn streams(args: &RecordArgs) -> Result<Vec<Stream>, Failure> {
    let addresses = connect_addresses(args.endpoints)?;
    let mut streams: Vec<Stream> = args.endpoints.iter().map(|_| Stream::default()).collect();
    for pair in args.replay {
        let Some((endpoint, replay)) = pair.split_once('=') else {
            return Err(Failure::invalid(vec![format!(
                "--replay {}: expected ENDPOINT=REPLAY, an endpoint to record and its \
                 publisher's replay socket",
                kvroute_core::output::quote_str(pair)
            )]));
        };
        let quoted = kvroute_core::output::quote_str(endpoint);
        let index = connect_address(endpoint)
            .ok()
            .and_then(|address| addresses.iter().position(|a| *a == address));
        let Some(index) = index else {
            return Err(Failure::invalid(vec![format!(
                "--replay {pair}: {quoted} is not one of the endpoints to record"
            )]));
        };
        if streams[index].replay_endpoint.is_some() {
            return Err(Failure::invalid(vec![format!(
                "--replay {pair}: {quoted} has a replay endpoint already"
            )]));
        }
        // Refused now rather than at the first gap, where it could only leave the gap
        // unfilled long after the user could have fixed it.
        if let Err(reason) = connect_address(replay) {
            return Err(Failure::invalid(vec![format!("--replay {pair}: {reason}")]));
        }
        streams[index].replay_endpoint = Some(replay.to_owned());
    }
    Ok(streams)
}

#[derive(Default)]
struct Tally {
    written: u64,
    malformed: u64,
    replayed: u64,
    gaps: u64,
    gaps_unfilled: u64,
}

/// The capture being written, and the count that ends it.
struct Capture<'w> {
    w: &'w mut dyn Write,
    out: &'w Path,
    count: Option<u64>,
    tally: &'w mut Tally,
}

impl Stream {
    /// Whether the open replay holds and keeps as many messages as it may.
    fn replay_full(&self) -> bool {
        self.held.len() + self.answers.len() >= REPLAY_MESSAGES_MAX
    }

    /// Keeps one answer of the open replay: the first for its number, and only one
    /// after the last number written (an earlier one fills nothing).
    fn answered(&mut self, seq: u64, answer: Answer) {
        if self.last_seq.is_some_and(|last| seq <= last) {
            return;
        }
        self.answers.entry(seq).or_insert(answer);
    }
}

impl Capture<'_> {
    fn full(&self) -> bool {
        self.count.is_some_and(|n| self.tally.written >= n)
    }

    /// Writes one line, unless `--count` lines are written already.
    fn write(&mut self, endpoint: &str, frames: &Frames, replayed: bool) -> Result<(), Failure> {
        if self.full() {
            return Ok(());
        }
        let line = capture_line(endpoint, frames, replayed);
        // A topic of escaped control characters can grow a line past the cap its
        // import reads, which would make the whole capture unreadable.
        if line.len() >= LINE_BYTES_MAX {
            self.tally.malformed += 1;
            return Ok(());
        }
        writeln!(self.w, "{line}").map_err(|e| write_failure(self.out, &e))?;
        self.tally.written += 1;
        self.tally.replayed += u64::from(replayed);
        Ok(())
    }

    /// A live message of `stream`: held while a replay is open, else written, after
    /// opening a replay when it shows a gap and the endpoint has a replay socket.
    /// Returns the replay to ask for, as (request number, first missing sequence).
    fn live(
        &mut self,
        endpoint: &str,
        stream: &mut Stream,
        frames: Frames,
    ) -> Result<Option<(u64, u64)>, Failure> {
        if stream.open_replay.is_some() {
            stream.held.push(frames);
            return Ok(None);
        }
        let missing_from = stream
            .last_seq
            .and_then(|last| last.checked_add(1))
            .filter(|&next| frames.seq > next);
        if let (Some(first_missing), Some(_)) = (missing_from, &stream.replay_endpoint) {
            stream.requests += 1;
            stream.open_replay = Some(stream.requests);
            stream.held.push(frames);
            return Ok(Some((stream.requests, first_missing)));
        }
        stream.last_seq = Some(frames.seq);
        self.write(endpoint, &frames, false).map(|()| None)
    }

    /// A message of `stream`'s SUB socket: counted malformed, or taken as [`Self::live`]
    /// does; a replay full with it is ended.
    fn message(
        &mut self,
        endpoint: &str,
        stream: &mut Stream,
        message: zeromq::ZmqMessage,
    ) -> Result<Option<(u64, u64)>, Failure> {
        stream.heard = true;
        let Some(frames) = live_frames(message) else {
            self.tally.malformed += 1;
            return Ok(None);
        };
        let asked = self.live(endpoint, stream, frames)?;
        if stream.open_replay.is_some() && stream.replay_full() {
            self.flush(endpoint, stream)?;
        }
        Ok(asked)
    }

    /// One message of the answer to `stream`'s replay request `request`: kept, or
    /// counted malformed; a late answer to an earlier request is dropped.
    fn answer(
        &mut self,
        endpoint: &str,
        stream: &mut Stream,
        request: u64,
        message: zeromq::ZmqMessage,
    ) -> Result<(), Failure> {
        if stream.open_replay != Some(request) {
            return Ok(());
        }
        match answer_frames(message) {
            Some(None) => {}
            Some(Some((seq, answer))) => stream.answered(seq, answer),
            None => self.tally.malformed += 1,
        }
        if stream.replay_full() {
            self.flush(endpoint, stream)?;
        }
        Ok(())
    }

    /// Ends `stream`'s replay: writes the held messages in the order received, each
    /// after the answers that fill the hole before it (SPEC.md §13.6).
    fn flush(&mut self, endpoint: &str, stream: &mut Stream) -> Result<(), Failure> {
        let answers = std::mem::take(&mut stream.answers);
        for held in std::mem::take(&mut stream.held) {
            if let Some(last) = stream.last_seq.filter(|&l| held.seq > l.saturating_add(1)) {
                self.tally.gaps += 1;
                let mut filled = 0u64;
                for (&seq, answer) in answers.range(last + 1..held.seq) {
                    let frames = Frames {
                        topic: answer.topic.clone().unwrap_or_else(|| held.topic.clone()),
                        seq,
                        payload: answer.payload.clone(),
                    };
                    self.write(endpoint, &frames, true)?;
                    filled += 1;
                }
                if filled != held.seq - last - 1 {
                    self.tally.gaps_unfilled += 1;
                }
            }
            stream.last_seq = Some(held.seq);
            self.write(endpoint, &held, false)?;
        }
        stream.open_replay = None;
        Ok(())
    }
}

/// Shows on the progress line how many endpoints are connected and how many messages
/// were written, and warns once about each endpoint silent for [`SILENCE_WARNING`].
fn show_progress(
    progress: &crate::progress::Progress,
    since: Instant,
    endpoints: &[String],
    streams: &mut [Stream],
    tally: &Tally,
) {
    let connected = streams.iter().filter(|s| s.connected).count();
    let malformed = match tally.malformed {
        0 => String::new(),
        n => format!(", {n} malformed"),
    };
    progress.phase(&format!(
        "{connected} of {} endpoints connected, {} messages{malformed}",
        streams.len(),
        tally.written
    ));
    if since.elapsed() < SILENCE_WARNING {
        return;
    }
    for (endpoint, stream) in endpoints.iter().zip(streams) {
        if !stream.heard && !stream.warned_silent {
            stream.warned_silent = true;
            let state = if stream.connected {
                "connected"
            } else {
                "not connected"
            };
            out::note(&format!(
                "kvroute record: no message from {endpoint} after {} s ({state}): is the \
                 engine publishing there?",
                SILENCE_WARNING.as_secs()
            ));
        }
    }
}

async fn receive(
    args: &RecordArgs<'_>,
    mut streams: Vec<Stream>,
    capture: &mut Capture<'_>,
    progress: &crate::progress::Progress,
) -> Result<(), Failure> {
    let started = Instant::now();
    let (sender, mut receiver) = tokio::sync::mpsc::channel(1024);
    for (index, endpoint) in args.endpoints.iter().enumerate() {
        tokio::spawn(subscribe(index, endpoint.clone(), sender.clone()));
    }
    // `--seconds` is at most 2^53 - 1, which no clock reaches; a deadline past what
    // `Instant` can hold is none, rather than a panic.
    let deadline = args
        .seconds
        .and_then(|s| Instant::now().checked_add(Duration::from_secs(s)));
    let wait = Duration::from_millis(args.replay_wait_ms);
    let panics_before = PANICS.load(Ordering::SeqCst);
    loop {
        if PANICS.load(Ordering::SeqCst) != panics_before {
            return Err(Failure::other(
                "kvroute record: a socket task failed (the panic above); no capture written"
                    .to_owned(),
            ));
        }
        show_progress(
            progress,
            started,
            args.endpoints,
            &mut streams,
            capture.tally,
        );
        let timed_out = deadline.is_some_and(|d| Instant::now() >= d);
        if capture.full() || timed_out || out::stop_signal().is_some() {
            break;
        }
        let received = match tokio::time::timeout(POLL_INTERVAL, receiver.recv()).await {
            Ok(Some(received)) => received,
            Ok(None) | Err(_) => continue,
        };
        match received {
            Received::Connected(index) => streams[index].connected = true,
            Received::Message(index, message) => {
                let stream = &mut streams[index];
                let asked = capture.message(&args.endpoints[index], stream, message)?;
                if let Some((request, first_missing)) = asked {
                    let replay = stream.replay_endpoint.clone().unwrap_or_default();
                    let ask = ask(index, request, replay, first_missing, wait, sender.clone());
                    tokio::spawn(ask);
                }
            }
            Received::Answer(index, request, message) => {
                let stream = &mut streams[index];
                capture.answer(&args.endpoints[index], stream, request, message)?;
            }
            Received::AnswerEnded(index, request) => {
                if streams[index].open_replay == Some(request) {
                    capture.flush(&args.endpoints[index], &mut streams[index])?;
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
    // Whatever stopped the recording, what was received is kept: an open replay is
    // given up and its held messages written with what it answered so far.
    for (index, stream) in streams.iter_mut().enumerate() {
        capture.flush(&args.endpoints[index], stream)?;
    }
    Ok(())
}

fn write_failure(out: &Path, error: &std::io::Error) -> Failure {
    Failure::other(format!("{}: cannot write: {error}", out.display()))
}

/// One endpoint's socket: connects (retrying until the publisher is up), then hands
/// on every message until the writer goes away.
async fn subscribe(index: usize, endpoint: String, sender: tokio::sync::mpsc::Sender<Received>) {
    // A publisher not up yet is waited for however long it takes (SPEC.md §13.6); the
    // crate's default would give up after 30 s and end the recording.
    let mut options = zeromq::SocketOptions::default();
    options.no_connect_timeout();
    let mut socket = zeromq::SubSocket::with_options(options);
    let connected = async {
        socket.subscribe("").await?;
        socket.connect(&endpoint).await
    };
    if let Err(error) = connected.await {
        let _ = sender.send(Received::Failed(index, error)).await;
        return;
    }
    if sender.send(Received::Connected(index)).await.is_err() {
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

/// One replay request: a fresh DEALER socket asks `endpoint` for the messages from
/// `first_missing` on and hands on its answers until the end marker, for at most
/// `wait` in all (the socket connects within it too, retrying as SUB sockets do). A
/// fresh socket per request means a late answer to an earlier request cannot be taken
/// for this one's.
async fn ask(
    index: usize,
    request: u64,
    endpoint: String,
    first_missing: u64,
    wait: Duration,
    sender: tokio::sync::mpsc::Sender<Received>,
) {
    let exchange = async {
        let mut socket = zeromq::DealerSocket::new();
        socket.connect(&endpoint).await?;
        let mut asked = zeromq::ZmqMessage::from(Vec::<u8>::new());
        asked.push_back(first_missing.to_be_bytes().to_vec().into());
        socket.send(asked).await?;
        loop {
            let message = socket.recv().await?;
            let end = is_end_marker(&message);
            if sender
                .send(Received::Answer(index, request, message))
                .await
                .is_err()
                || end
            {
                return Ok::<(), zeromq::ZmqError>(());
            }
        }
    };
    // A replay socket that fails or does not answer in time ends the replay the same
    // way: the capture keeps what was answered, and any hole left is the import's gap.
    let _ = tokio::time::timeout(wait, exchange).await;
    let _ = sender.send(Received::AnswerEnded(index, request)).await;
}

/// Whether a replay answer is the end marker: a sequence frame of -1 and an empty
/// payload as its last two frames.
fn is_end_marker(message: &zeromq::ZmqMessage) -> bool {
    let frames = message.iter().collect::<Vec<_>>();
    matches!(frames.as_slice(), [.., seq, payload] if seq.as_ref() == END_SEQ && payload.is_empty())
}

/// Whether a message's topic and payload frames together are small enough to write.
fn fits(topic: &[u8], payload: &[u8]) -> bool {
    topic.len().saturating_add(payload.len()) <= MESSAGE_BYTES_MAX
}

/// A live message of three frames with an 8-byte sequence frame, its topic and
/// payload within [`MESSAGE_BYTES_MAX`]; `None` for any other.
fn live_frames(message: zeromq::ZmqMessage) -> Option<Frames> {
    let frames = message.into_vec();
    let [topic, seq, payload] = frames.as_slice() else {
        return None;
    };
    if !fits(topic, payload) {
        return None;
    }
    Some(Frames {
        topic: topic.to_vec(),
        seq: u64::from_be_bytes(seq.as_ref().try_into().ok()?),
        payload: payload.to_vec(),
    })
}

/// A replay answer as a DEALER receives it (SPEC.md §13.1): an empty delimiter, then
/// `[seq, payload]` or `[topic, seq, payload]`. `Some(None)` for the end marker,
/// `None` for anything else.
fn answer_frames(message: zeromq::ZmqMessage) -> Option<Option<(u64, Answer)>> {
    if is_end_marker(&message) {
        return Some(None);
    }
    let frames = message.into_vec();
    let (topic, seq, payload) = match frames.as_slice() {
        [delimiter, seq, payload] if delimiter.is_empty() => (None, seq, payload),
        [delimiter, topic, seq, payload] if delimiter.is_empty() => (Some(topic), seq, payload),
        _ => return None,
    };
    if !fits(topic.map_or(&[][..], |t| t.as_ref()), payload) {
        return None;
    }
    let seq = u64::from_be_bytes(seq.as_ref().try_into().ok()?);
    Some(Some((
        seq,
        Answer {
            topic: topic.map(|t| t.to_vec()),
            payload: payload.to_vec(),
        },
    )))
}

/// The capture line of a message, as canonical JSON (members in byte order).
fn capture_line(endpoint: &str, frames: &Frames, replayed: bool) -> String {
    let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut line = serde_json::Map::new();
    line.insert("endpoint".into(), endpoint.into());
    match std::str::from_utf8(&frames.topic) {
        Ok(text) => line.insert("topic".into(), text.into()),
        Err(_) => line.insert("topic_b64".into(), base64(&frames.topic).into()),
    };
    line.insert("seq".into(), frames.seq.into());
    line.insert("payload_b64".into(), base64(&frames.payload).into());
    if replayed {
        line.insert("replayed".into(), true.into());
    }
    serde_json::Value::Object(line).to_string()
}

#[cfg(test)]
mod tests {
    //! The hold-and-fill rule of SPEC.md §13.6 on hand-made messages: which answers
    //! are written, where, and which are not.

    use super::*;

    fn frames(seq: u64, payload: &str) -> Frames {
        Frames {
            topic: b"t".to_vec(),
            seq,
            payload: payload.as_bytes().to_vec(),
        }
    }

    /// The capture's (seq, payload, replayed) after `live` messages, a replay opened
    /// by the first gap whose `answers` come before the flush, and the tally.
    fn run(
        count: Option<u64>,
        live: &[(u64, &str)],
        answers: &[(u64, &str)],
    ) -> (Vec<(u64, String, bool)>, Tally) {
        let mut bytes = Vec::new();
        let mut tally = Tally::default();
        let mut stream = Stream {
            replay_endpoint: Some("tcp://r:1".to_owned()),
            ..Stream::default()
        };
        {
            let mut capture = Capture {
                w: &mut bytes,
                out: Path::new("c"),
                count,
                tally: &mut tally,
            };
            for &(seq, payload) in live {
                let asked = capture.live("e", &mut stream, frames(seq, payload));
                assert!(asked.is_ok(), "writing to memory cannot fail");
            }
            for &(seq, payload) in answers {
                let answer = Answer {
                    topic: None,
                    payload: payload.as_bytes().to_vec(),
                };
                stream.answered(seq, answer);
            }
            assert!(capture.flush("e", &mut stream).is_ok());
        }
        let lines = String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                assert_eq!(
                    v["topic"], "t",
                    "an answer without a topic takes the held one's"
                );
                let payload = base64::engine::general_purpose::STANDARD
                    .decode(v["payload_b64"].as_str().unwrap())
                    .unwrap();
                (
                    v["seq"].as_u64().unwrap(),
                    String::from_utf8(payload).unwrap(),
                    v.get("replayed").is_some(),
                )
            })
            .collect();
        (lines, tally)
    }

    fn line(seq: u64, payload: &str, replayed: bool) -> (u64, String, bool) {
        (seq, payload.to_owned(), replayed)
    }

    #[test]
    fn answers_fill_the_holes_before_held_messages_and_no_number_is_written_twice() {
        // Live 0, then 3 (opens the replay for 1), then 5 and 6 held. The answer holds
        // 1 to 7: 3, 5 and 6 were received live (duplicates), 7 is past the last held.
        let answers = [
            (1, "r1"),
            (2, "r2"),
            (3, "dup"),
            (4, "r4"),
            (5, "dup"),
            (7, "r7"),
        ];
        let (lines, tally) = run(
            None,
            &[(0, "l0"), (3, "l3"), (5, "l5"), (6, "l6")],
            &answers,
        );
        assert_eq!(
            lines,
            [
                line(0, "l0", false),
                line(1, "r1", true),
                line(2, "r2", true),
                line(3, "l3", false),
                line(4, "r4", true),
                line(5, "l5", false),
                line(6, "l6", false),
            ]
        );
        assert_eq!((tally.replayed, tally.gaps, tally.gaps_unfilled), (3, 2, 0));
    }

    #[test]
    fn a_hole_the_answers_leave_is_counted_unfilled_and_a_restart_gets_no_answers() {
        // The answer lacks 2; then the publisher restarts (0) while the replay is open.
        let (lines, tally) = run(None, &[(0, "l0"), (3, "l3"), (0, "again")], &[(1, "r1")]);
        assert_eq!(
            lines,
            [
                line(0, "l0", false),
                line(1, "r1", true),
                line(3, "l3", false),
                line(0, "again", false),
            ]
        );
        assert_eq!((tally.replayed, tally.gaps, tally.gaps_unfilled), (1, 1, 1));
    }

    #[test]
    fn a_replay_is_full_at_its_bound_and_keeps_no_answer_at_or_before_the_last_line() {
        let mut stream = Stream {
            last_seq: Some(10),
            ..Stream::default()
        };
        let answer = || Answer {
            topic: None,
            payload: Vec::new(),
        };
        stream.answered(10, answer());
        stream.answered(3, answer());
        assert!(stream.answers.is_empty());
        stream.held = (0..REPLAY_MESSAGES_MAX as u64 - 1)
            .map(|seq| frames(seq + 20, ""))
            .collect();
        assert!(!stream.replay_full());
        stream.answered(11, answer());
        stream.answered(11, answer());
        assert_eq!(stream.answers.len(), 1, "one answer a number");
        assert!(stream.replay_full());
    }

    #[test]
    fn a_flush_stops_at_the_count() {
        let (lines, tally) = run(
            Some(3),
            &[(0, "l0"), (4, "l4")],
            &[(1, "r1"), (2, "r2"), (3, "r3")],
        );
        assert_eq!(
            lines,
            [
                line(0, "l0", false),
                line(1, "r1", true),
                line(2, "r2", true)
            ]
        );
        assert_eq!(tally.written, 3);
    }

    #[test]
    fn a_panic_in_a_socket_task_fails_the_recording_at_once() {
        count_panics();
        let endpoints = ["tcp://127.0.0.1:9".to_owned()];
        let args = RecordArgs {
            endpoints: &endpoints,
            out: Path::new("c"),
            count: None,
            seconds: Some(20),
            replay: &[],
            replay_wait_ms: 1000,
        };
        let (mut bytes, mut tally) = (Vec::new(), Tally::default());
        let mut capture = Capture {
            w: &mut bytes,
            out: Path::new("c"),
            count: None,
            tally: &mut tally,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let Ok(streams) = streams(&args) else {
            panic!("one loopback endpoint is a valid recording");
        };
        let started = Instant::now();
        let recorded = runtime.block_on(async {
            tokio::spawn(async { panic!("a planted panic in a socket task") });
            let progress = crate::progress::Progress::start("record", "testing");
            receive(&args, streams, &mut capture, &progress).await
        });
        let Err(failure) = recorded else {
            panic!("a recording whose socket task panicked must fail");
        };
        assert_eq!(failure.status, 1);
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn oversized_frames_are_no_message() {
        let big = vec![0u8; MESSAGE_BYTES_MAX];
        let live = |frames: &[&[u8]]| {
            let mut message = zeromq::ZmqMessage::from(frames[0].to_vec());
            for frame in &frames[1..] {
                message.push_back(frame.to_vec().into());
            }
            message
        };
        let seq = 1u64.to_be_bytes();
        assert!(live_frames(live(&[b"", &seq, &big])).is_some());
        assert!(live_frames(live(&[b"t", &seq, &big])).is_none());
        assert!(answer_frames(live(&[b"", &seq, &big])).is_some());
        assert!(answer_frames(live(&[b"", b"t", &seq, &big])).is_none());
    }

    #[test]
    fn both_answer_layouts_and_the_end_marker_are_read() {
        let message = |frames: &[&[u8]]| {
            let mut message = zeromq::ZmqMessage::from(frames[0].to_vec());
            for frame in &frames[1..] {
                message.push_back(frame.to_vec().into());
            }
            message
        };
        let seq = 7u64.to_be_bytes();
        let Some(Some((7, answer))) = answer_frames(message(&[b"", &seq, b"p"])) else {
            panic!("two frames after the delimiter are an answer without a topic");
        };
        assert_eq!((answer.topic, answer.payload), (None, b"p".to_vec()));
        let Some(Some((7, answer))) = answer_frames(message(&[b"", b"kv", &seq, b"p"])) else {
            panic!("three frames after the delimiter are an answer with its topic");
        };
        assert_eq!(answer.topic, Some(b"kv".to_vec()));
        assert!(matches!(
            answer_frames(message(&[b"", &END_SEQ, b""])),
            Some(None)
        ));
        assert!(matches!(
            answer_frames(message(&[b"", b"", &END_SEQ, b""])),
            Some(None)
        ));
        assert!(
            answer_frames(message(&[b"x", &seq, b"p"])).is_none(),
            "no delimiter"
        );
        assert!(answer_frames(message(&[b"", b"short", b"p"])).is_none());
    }
}
