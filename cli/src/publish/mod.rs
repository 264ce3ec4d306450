//! `kvroute publish` (SPEC.md §17): kvroute as an engine fleet on the wire. A trace's
//! cache events become vLLM `KVEventBatch` messages ([`encode`]), numbered per worker
//! with a wire's faults ([`plan`]), and are sent on one ZeroMQ PUB socket per worker,
//! with a replay socket each when asked ([`socket`]). `kvroute conform` publishes its
//! cases through the same three parts.

pub(crate) mod encode;
pub(crate) mod plan;
pub(crate) mod socket;

use crate::failure::Failure;
use kvroute_cli::args::PublishArgs;
use std::io::Write;
use std::time::Duration;

pub(crate) use encode::BLOCK_TOKENS;

/// Binds the publishers, prints their endpoints, waits for subscribers, sends every
/// message and keeps answering replays for `--hold-ms`.
pub(crate) fn publish(args: PublishArgs) -> Result<(), Failure> {
    let trace_bytes = crate::inputs::read_input(&args.trace, "the trace")?;
    let invalid =
        |line: String| Failure::invalid(vec![format!("{}: {line}", args.trace.display())]);
    kvroute_core::parse_trace(&trace_bytes).map_err(|errors| {
        invalid(
            errors
                .to_string()
                .lines()
                .next()
                .unwrap_or("invalid trace")
                .to_string(),
        )
    })?;
    let trace: serde_json::Value =
        serde_json::from_slice(&trace_bytes).map_err(|e| invalid(e.to_string()))?;
    let wire = read_wire(&args)?;
    let salt = match args.salt {
        kvroute_cli::args::PublishSalt::Vllm => encode::SaltForm::Vllm,
        kvroute_cli::args::PublishSalt::DynamoTagged => encode::SaltForm::DynamoTagged,
        kvroute_cli::args::PublishSalt::None => encode::SaltForm::None,
    };
    let plan = plan::plan(&trace, &wire, salt).map_err(invalid)?;
    if plan.workers.len() > usize::from(u16::MAX) / 2 {
        return Err(invalid(format!(
            "{} workers: at most 32767 can be published",
            plan.workers.len()
        )));
    }
    let timeout = Duration::from_millis(args.timeout_ms);
    let publishers = socket::Publishers::bind(
        plan.workers.len(),
        args.replay || wire.replayable,
        args.port,
        timeout,
    )
    .map_err(Failure::other)?;
    let mut out = std::io::stdout().lock();
    print_endpoints(&mut out, &plan, &publishers).map_err(write_failed)?;
    let join = Duration::from_millis(args.wait_ms);
    let sent = publishers
        .send(&plan, join, timeout)
        .map_err(Failure::other)?;
    std::thread::sleep(Duration::from_millis(args.hold_ms));
    let restarts = plan
        .steps
        .iter()
        .filter(|s| matches!(s, plan::Step::Restart { .. }))
        .count();
    let messages = plan.steps.len() - restarts;
    writeln!(
        out,
        "published {sent} of {messages} messages from {} workers ({} lost, {restarts} restarts)",
        plan.workers.len(),
        messages - sent,
    )
    .map_err(write_failed)?;
    Ok(())
}

fn write_failed(e: std::io::Error) -> Failure {
    Failure::other(format!("kvroute: cannot write to stdout: {e}"))
}

/// `--wire`, or the faithful wire.
fn read_wire(args: &PublishArgs) -> Result<plan::Wire, Failure> {
    let Some(path) = &args.wire else {
        return Ok(plan::Wire::default());
    };
    let bytes = crate::inputs::read_input(path, "the wire")?;
    serde_json::from_slice::<plan::Wire>(&bytes)
        .map_err(|e| Failure::invalid(vec![format!("{}: {e}", path.display())]))
}

/// One line a worker, `<id> <endpoint>[ replay <endpoint>]`, flushed so a caller can
/// point its router there before the first message.
fn print_endpoints(
    out: &mut impl Write,
    plan: &plan::Plan,
    publishers: &socket::Publishers,
) -> std::io::Result<()> {
    for (i, worker) in plan.workers.iter().enumerate() {
        let replay = publishers.replay_endpoints[i]
            .as_ref()
            .map(|r| format!(" replay {r}"))
            .unwrap_or_default();
        writeln!(out, "{worker} {}{replay}", publishers.endpoints[i])?;
    }
    out.flush()
}
