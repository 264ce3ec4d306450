//! One ZeroMQ SUB socket that counts messages, for `bench/publish/vllm_rate.py`: both
//! publishers are measured against this subscriber too, since a Python subscriber
//! takes about as long a message as the publishers do, so its loop caps both figures.
//! It connects to ENDPOINT, receives N messages and prints the seconds from the first
//! to the last, and their frames' bytes. It exits 1 when no message arrives for 20 s.
//!
//! usage: sub-count ENDPOINT N

use std::time::{Duration, Instant};
use zeromq::{Socket, SocketRecv};

/// How long to wait for the next message before giving up.
const IDLE_LIMIT: Duration = Duration::from_secs(20);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(endpoint), Some(Ok(n))) = (args.first(), args.get(1).map(|n| n.parse::<u64>()))
    else {
        eprintln!("usage: sub-count ENDPOINT N");
        std::process::exit(2);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a single-threaded runtime starts");
    match runtime.block_on(count(endpoint, n)) {
        Ok((seconds, bytes)) => println!("{n} messages {bytes} bytes {seconds:.6} s"),
        Err(e) => {
            eprintln!("sub-count: {e}");
            std::process::exit(1);
        }
    }
}

/// A SUB socket connected to `endpoint`, retried until the publisher has bound it: this
/// ZeroMQ implementation does not retry a refused connection on its own.
async fn connected(endpoint: &str) -> Result<zeromq::SubSocket, String> {
    let deadline = Instant::now() + IDLE_LIMIT;
    loop {
        let mut socket = zeromq::SubSocket::new();
        match socket.connect(endpoint).await {
            Ok(()) => return Ok(socket),
            Err(e) if Instant::now() > deadline => return Err(format!("{endpoint}: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Receives `n` messages from `endpoint`: the seconds from the first to the last, and
/// the bytes of every frame.
async fn count(endpoint: &str, n: u64) -> Result<(f64, u64), String> {
    let mut socket = connected(endpoint).await?;
    socket.subscribe("").await.map_err(|e| e.to_string())?;
    let mut first = None;
    let mut bytes = 0u64;
    for received in 0..n {
        let message = tokio::time::timeout(IDLE_LIMIT, socket.recv())
            .await
            .map_err(|_| format!("only {received} of {n} messages arrived"))?
            .map_err(|e| e.to_string())?;
        first.get_or_insert_with(Instant::now);
        bytes += message.iter().map(|frame| frame.len() as u64).sum::<u64>();
    }
    let seconds = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    Ok((seconds, bytes))
}
