//! Streams the oracle's receipt of a trace file (SPEC §6) and reports its size, digest
//! and time: `cargo run --release -p kvroute-oracle --example replay -- TRACE [--out FILE |
//! --validate | --repeat N]`.
//! With `--out`, the full canonical receipt (digest included) plus `\n` is written to
//! FILE; without it, the pieces are counted and dropped, so memory stays the oracle's
//! state plus one decision.

use std::io::Write;
use std::ops::ControlFlow;
use std::process::exit;
use std::time::Instant;

use kvroute_oracle::{replay, replay_streaming, ReceiptPiece, Streamed};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(trace) = args.first() else {
        eprintln!("usage: replay TRACE [--out FILE]");
        exit(2)
    };
    let bytes = std::fs::read(trace).unwrap_or_else(|e| {
        eprintln!("{trace}: {e}");
        exit(2)
    });
    let started = Instant::now();
    if args.iter().any(|a| a == "--validate") {
        let canonical = kvroute_oracle::validate(&bytes).unwrap_or_else(|lines| {
            eprintln!("{}", lines.join("\n"));
            exit(2)
        });
        let seconds = started.elapsed().as_secs_f64();
        eprintln!(
            "valid: {} canonical bytes in {seconds:.3} s",
            canonical.len()
        );
        return;
    }
    if let Some(n) = args
        .iter()
        .position(|a| a == "--repeat")
        .and_then(|i| args.get(i + 1))
    {
        let n: u32 = n.parse().expect("--repeat N");
        for _ in 0..n {
            replay(&bytes).expect("valid");
        }
        let each = started.elapsed().as_secs_f64() / f64::from(n.max(1));
        eprintln!(
            "{n} replays, {:.1} us each ({:.0}/s)",
            each * 1e6,
            1.0 / each
        );
        return;
    }
    if let Some(out) = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
    {
        let receipt = replay(&bytes).unwrap_or_else(|lines| {
            eprintln!("{}", lines.join("\n"));
            exit(2)
        });
        let mut file = std::fs::File::create(out).expect("create --out");
        file.write_all(&receipt)
            .and_then(|()| file.write_all(b"\n"))
            .expect("write --out");
        eprintln!(
            "{} bytes in {:.3} s",
            receipt.len(),
            started.elapsed().as_secs_f64()
        );
        return;
    }
    let (mut total, mut elements) = (0usize, 0usize);
    let streamed = replay_streaming(&bytes, &mut |piece| {
        match piece {
            ReceiptPiece::Structure(b) => total += b.len(),
            ReceiptPiece::Element { bytes, .. } => {
                total += bytes.len();
                elements += 1;
            }
        }
        ControlFlow::Continue(())
    })
    .unwrap_or_else(|lines| {
        eprintln!("{}", lines.join("\n"));
        exit(2)
    });
    let digest = match streamed {
        Streamed::Complete { receipt_digest } => receipt_digest,
        Streamed::Stopped => String::from("(stopped)"),
    };
    eprintln!(
        "{total} bytes, {elements} elements, {digest}, in {:.3} s",
        started.elapsed().as_secs_f64()
    );
}
