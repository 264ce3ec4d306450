//! A run with every case of SPEC.md §14.7 for the report's Why it missed view: the lab
//! trace as a Dynamo fleet and Dynamo records of its `cache_plus_load` run.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The lab trace with its workers named as Dynamo's (so Dynamo records can name where
/// they ran) and a tenant whose name must be escaped, and one Dynamo record per routed
/// `cache_plus_load` decision: most cached as predicted, some short of it (phantom),
/// some over it (missed), some served on the next worker or outside the fleet, some
/// without a cached figure.
pub fn write(dir: &Path) -> (PathBuf, PathBuf) {
    let mut trace = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/lab/trace.json"),
    )
    .unwrap();
    for i in 0..4 {
        trace = trace.replace(&format!("\"w{i}\""), &format!("\"dynamo|{i}|dp0\""));
    }
    let trace = trace.replace("\"initech\"", "\"init<b>ech&\"");
    let trace_path = dir.join("lab-dynamo.trace.json");
    std::fs::write(&trace_path, trace).unwrap();
    let replayed = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["replay", trace_path.to_str().unwrap(), "--format", "json"])
        .output()
        .expect("the kvroute binary runs");
    assert!(replayed.status.success());
    let receipt: serde_json::Value = serde_json::from_slice(&replayed.stdout).unwrap();
    let run = &receipt["runs"][3];
    assert_eq!(run["policy"], "cache_plus_load");
    let mut lines = String::new();
    for (n, d) in run["decisions"].as_array().unwrap().iter().enumerate() {
        let Some(chosen) = d["chosen"].as_str() else {
            continue;
        };
        let rows = d["candidates"].as_array().unwrap();
        let row = rows.iter().find(|r| r["worker"] == chosen).unwrap();
        let mut worker: u64 = chosen.split('|').nth(1).unwrap().parse().unwrap();
        let mut cached = row["reuse"].as_u64().unwrap();
        match n % 5 {
            1 => cached = cached.saturating_sub(200),
            3 => cached += 64,
            _ => {}
        }
        match n % 11 {
            4 => worker = (worker + 1) % 4,
            6 => worker = 9,
            _ => {}
        }
        let mut request = serde_json::json!({"request_id": format!("c{n}"),
            "x_request_id": d["request"], "ttft_ms": 10 + n, "avg_itl_ms": 1,
            "worker": {"prefill_worker_id": worker, "decode_worker_id": worker}});
        if n % 17 != 0 {
            request["cached_tokens"] = cached.into();
        }
        lines += &serde_json::json!({"event_type": "request_end", "request": request}).to_string();
        lines.push('\n');
    }
    let completions = dir.join("lab-dynamo.completions.jsonl");
    std::fs::write(&completions, lines).unwrap();
    (trace_path, completions)
}
