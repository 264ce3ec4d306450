//! The drivers of SPEC.md §16.4: how each router is started, told its fleet, fed the
//! case's events and asked the case's question, each wait bounded. A driver answers
//! with a [`Response`] and the router's log; everything it started is stopped when it
//! returns (the router, the stubs and the publishers are dropped).

use super::case::{Answer, Case, Question};
use super::feed::{self, Feed};
use super::http;
use super::outcome::Response;
use super::reference;
use super::report::Implementation;
use super::stub::Fleet;
use super::supervise::{free_port, wait_until, Router};
use crate::publish::encode::SaltForm;
use kvroute_cli::args::ConformRouter;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

/// The waits of SPEC.md §16.1.
pub struct Bounds {
    /// After the events are sent, before the request (`--wait-ms`).
    pub settle: Duration,
    /// Every other wait (`--timeout-ms`).
    pub timeout: Duration,
}

/// The driver's name, as `--router` spells it.
pub fn name(router: ConformRouter) -> &'static str {
    match router {
        ConformRouter::DynamoSelect => "dynamo-select",
        ConformRouter::VllmRouter => "vllm-router",
        ConformRouter::Smg => "smg",
        ConformRouter::Kvroute => "kvroute",
    }
}

/// The report's `implementation` for the router.
pub fn implementation(
    router: ConformRouter,
    version: Option<String>,
    _command: &[OsString],
) -> Implementation {
    let version = version.unwrap_or_else(|| match router {
        ConformRouter::Kvroute => env!("CARGO_PKG_VERSION").to_string(),
        _ => "unknown".into(),
    });
    let (organization, project, url) = match router {
        ConformRouter::DynamoSelect => (
            "NVIDIA",
            "dynamo select service",
            "github.com/ai-dynamo/dynamo",
        ),
        ConformRouter::VllmRouter => ("vLLM", "vllm-router", "github.com/vllm-project/router"),
        ConformRouter::Smg => ("SGLang", "smg", "github.com/lightseekorg/smg"),
        ConformRouter::Kvroute => ("kvroute", "kvroute", "kvroute"),
    };
    Implementation {
        organization,
        project,
        url,
        version,
    }
}

/// Runs one case under the driver: its response and the router's log.
pub fn run(
    router: ConformRouter,
    command: &[OsString],
    case: &Case,
    bounds: &Bounds,
) -> (Response, String) {
    run_with(router, command, case, bounds, &feed::bind)
}

/// How a driver binds a case's publishers.
pub type Bind = dyn Fn(&Case, SaltForm) -> Result<Box<dyn Feed>, String>;

/// [`run`] with the publishers bound by `bind`.
pub fn run_with(
    router: ConformRouter,
    command: &[OsString],
    case: &Case,
    bounds: &Bounds,
    bind: &Bind,
) -> (Response, String) {
    match router {
        ConformRouter::Kvroute => {
            let reference = reference::answer(case);
            let response = Response::Answered {
                answer: reference.answer,
                load_placements: reference.load_placements,
            };
            (response, String::new())
        }
        ConformRouter::Smg => (
            Response::Skipped(
                "smg's event-fed index is fed by the gRPC worker protocol's SubscribeKvEvents stream, not a ZeroMQ PUB endpoint".into(),
            ),
            String::new(),
        ),
        ConformRouter::DynamoSelect => refusal_from_log(case, dynamo(command, case, bounds, bind)),
        ConformRouter::VllmRouter => refusal_from_log(case, vllm(command, case, bounds, bind)),
    }
}

/// A refusal case also passes on a log line that reports the block size (SPEC.md
/// §16.2), whatever the request's answer said.
fn refusal_from_log(case: &Case, (response, log): (Response, String)) -> (Response, String) {
    match response {
        Response::Answered {
            answer: Answer::Reported(seen),
            load_placements,
        } if case.question == Question::Refusal => {
            let answer = Answer::Reported(seen || reports_block_size(&log));
            (
                Response::Answered {
                    answer,
                    load_placements,
                },
                log,
            )
        }
        other => (other, log),
    }
}

/// The worker ids in byte order: index `i` is Dynamo's `worker_id` `i + 1`.
fn workers(case: &Case) -> Vec<String> {
    super::case::worker_ids(case)
}

/// A request's `(token ids, tenant, adapter)`.
fn request_fields(request: &Value, feed: &dyn Feed) -> (Vec<u64>, String, String) {
    let keys: Vec<String> = request["prefix"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["key"].as_str().map(str::to_string))
        .collect();
    let prompt = request["prompt_tokens"].as_u64().unwrap_or(0);
    let tokens = feed.request_token_ids(&keys, prompt);
    let field = |name: &str| request[name].as_str().unwrap_or("base").to_string();
    (tokens, field("tenant"), field("adapter"))
}

/// Whether the router's log reports a block size it refused (SPEC.md §16.2).
fn reports_block_size(log: &str) -> bool {
    log.lines().any(|line| {
        let lower = line.to_ascii_lowercase();
        (lower.contains("block size") || lower.contains("block_size"))
            && (lower.contains("warn") || lower.contains("error"))
    })
}

/// Runs `steps` against a started router, quoting its exit when it died meanwhile.
fn answered(router: &mut Router, steps: Result<Response, String>) -> Response {
    match steps {
        Ok(response) => response,
        Err(error) => match router.exited() {
            Some(exit) => Response::NoAnswer(format!("{error}; {exit}")),
            None => Response::NoAnswer(error),
        },
    }
}

/// Dynamo's select service (SPEC.md §16.4).
fn dynamo(command: &[OsString], case: &Case, bounds: &Bounds, bind: &Bind) -> (Response, String) {
    let ids = workers(case);
    let setup = || -> Result<(Fleet, Box<dyn Feed>, u16), String> {
        let fleet = Fleet::start(ids.len(), bounds.timeout)?;
        let feed = bind(case, salt_in(case, SaltForm::DynamoTagged))?;
        Ok((fleet, feed, free_port()?))
    };
    let (fleet, mut feed, port) = match setup() {
        Ok(s) => s,
        Err(e) => return (Response::NoAnswer(e), String::new()),
    };
    let args = vec![
        "--port".to_string(),
        port.to_string(),
        "--threads".into(),
        "1".into(),
    ];
    let mut router = match Router::start(command, &args) {
        Ok(r) => r,
        Err(e) => return (Response::NoAnswer(e), String::new()),
    };
    let steps = dynamo_steps(case, bounds, &ids, &fleet, feed.as_mut(), port);
    let response = answered(&mut router, steps);
    (response, router.log())
}

fn dynamo_steps(
    case: &Case,
    bounds: &Bounds,
    ids: &[String],
    fleet: &Fleet,
    feed: &mut dyn Feed,
    port: u16,
) -> Result<Response, String> {
    let t = bounds.timeout;
    let healthy = wait_until(t, || {
        http::exchange("GET", port, "/health", None, t).is_ok_and(|(s, _)| s == 200)
    });
    if !healthy {
        return Err(format!(
            "GET /health on port {port} did not answer 200 within {} ms",
            t.as_millis()
        ));
    }
    let model = model_of(case);
    dynamo_register(ids, fleet, feed, port, &model, t)?;
    feed.send_all(bounds.settle, t)?;
    std::thread::sleep(bounds.settle);
    let requests = super::case::requests(case);
    let (judged, loads) = requests.split_last().ok_or("no request")?;
    let body = |request: &Value| {
        let (tokens, tenant, adapter) = request_fields(request, feed);
        let mut body = json!({"model_name": model, "token_ids": tokens});
        if salted(case) {
            body["cache_salt"] = json!(tenant);
        }
        if adapter != "base" {
            body["lora_name"] = json!(adapter);
        }
        body
    };
    let worker_of = |answer: &Value| dynamo_worker(answer, ids);
    let mut placements = Vec::new();
    for load in loads {
        placements.push(worker_of(&http::json(
            "POST",
            port,
            "/select_and_reserve",
            Some(&body(load)),
            t,
        )?)?);
    }
    let answer = match case.question {
        Question::Choice => Answer::Worker(worker_of(&http::json(
            "POST",
            port,
            "/select",
            Some(&body(judged)),
            t,
        )?)?),
        Question::Overlap => {
            let scores = http::json("POST", port, "/overlap_scores", Some(&body(judged)), t)?;
            Answer::Overlap(device_blocks(&scores, ids)?)
        }
        Question::Refusal => {
            let select = http::exchange("POST", port, "/select", Some(&body(judged)), t)?;
            Answer::Reported(select.1.to_ascii_lowercase().contains("block"))
        }
    };
    Ok(Response::Answered {
        answer,
        load_placements: placements,
    })
}

/// The worker a select answer names (`worker_id` is the index in id order plus 1).
fn dynamo_worker(answer: &Value, ids: &[String]) -> Result<String, String> {
    let id = answer["worker_id"]
        .as_u64()
        .ok_or(format!("no worker_id in {answer}"))?;
    id.checked_sub(1)
        .and_then(|i| ids.get(i as usize))
        .cloned()
        .ok_or(format!("unknown worker_id {id}"))
}

/// The case's model: its first worker's.
fn model_of(case: &Case) -> String {
    case.trace_json["workers"][0]["model"]
        .as_str()
        .unwrap_or("m")
        .to_string()
}

/// `POST /workers` for each worker: its stub, block size and event endpoints.
fn dynamo_register(
    ids: &[String],
    fleet: &Fleet,
    feed: &dyn Feed,
    port: u16,
    model: &str,
    t: Duration,
) -> Result<(), String> {
    for (i, id) in ids.iter().enumerate() {
        let mut worker = json!({
            "worker_id": i + 1, "model_name": model, "endpoint": fleet.url(i), "block_size": 16,
            "kv_events_endpoints": {"0": feed.endpoint(id)},
        });
        if let Some(replay) = feed.replay_endpoint(id) {
            worker["replay_endpoint"] = json!(replay);
        }
        http::json("POST", port, "/workers", Some(&worker), t)?;
    }
    Ok(())
}

/// Each worker's `device_blocks` in an `/overlap_scores` answer (absent: 0).
fn device_blocks(scores: &Value, ids: &[String]) -> Result<BTreeMap<String, u64>, String> {
    let mut blocks: BTreeMap<String, u64> = ids.iter().map(|id| (id.clone(), 0)).collect();
    for row in scores["workers"]
        .as_array()
        .ok_or(format!("no workers in {scores}"))?
    {
        let id = row["worker_id"].as_u64().unwrap_or(0) as usize;
        if let Some(name) = id.checked_sub(1).and_then(|i| ids.get(i)) {
            *blocks.get_mut(name).expect("listed") += row["device_blocks"].as_u64().unwrap_or(0);
        }
    }
    Ok(blocks)
}

/// vLLM's router (SPEC.md §16.4).
fn vllm(command: &[OsString], case: &Case, bounds: &Bounds, bind: &Bind) -> (Response, String) {
    if case.question == Question::Overlap {
        return (
            Response::Skipped("vllm-router gives no overlap answer".into()),
            String::new(),
        );
    }
    if uses_adapters(case) {
        return (
            Response::Skipped(
                "vllm-router's OpenAI requests name no LoRA adapter it routes by".into(),
            ),
            String::new(),
        );
    }
    let ids = workers(case);
    let setup = || -> Result<(Fleet, Box<dyn Feed>, u16), String> {
        let fleet = Fleet::start(ids.len(), bounds.timeout)?;
        let feed = bind(case, salt_in(case, SaltForm::Vllm))?;
        Ok((fleet, feed, free_port()?))
    };
    let (fleet, mut feed, port) = match setup() {
        Ok(s) => s,
        Err(e) => return (Response::NoAnswer(e), String::new()),
    };
    let model = model_of(case);
    let args = vllm_args(&ids, &fleet, feed.as_ref(), port, &model);
    let mut router = match Router::start(command, &args) {
        Ok(r) => r,
        Err(e) => return (Response::NoAnswer(e), String::new()),
    };
    let steps = vllm_steps(
        case,
        bounds,
        &ids,
        &fleet,
        feed.as_mut(),
        port,
        &model,
        &router,
    );
    let response = answered(&mut router, steps);
    (response, router.log())
}

/// vllm-router's arguments: its port, the kv_aware policy, the stubs and their event
/// sources, block size 16, the model, and a one-second worker start-up check.
fn vllm_args(
    ids: &[String],
    fleet: &Fleet,
    feed: &dyn Feed,
    port: u16,
    model: &str,
) -> Vec<String> {
    let mut args = vec![
        "--host".to_string(),
        "127.0.0.1".into(),
        "--port".into(),
        port.to_string(),
    ];
    args.extend(["--policy".into(), "kv_aware".into(), "--worker-urls".into()]);
    args.extend((0..ids.len()).map(|i| fleet.url(i)));
    for (i, id) in ids.iter().enumerate() {
        args.extend([
            "--kv-event-source".into(),
            format!("{}={}", fleet.url(i), feed.endpoint(id)),
        ]);
        if let Some(replay) = feed.replay_endpoint(id) {
            args.extend([
                "--kv-event-replay-source".into(),
                format!("{}={replay}", fleet.url(i)),
            ]);
        }
    }
    args.extend([
        "--kv-event-block-size".into(),
        "16".into(),
        "--kv-event-model".into(),
        model.to_string(),
    ]);
    args.extend(["--worker-startup-check-interval".into(), "1".into()]);
    args
}

/// Whether the case names two or more tenants, and so salts its blocks and requests
/// (SPEC.md §16.2): one tenant needs no salt, and a router may give a salted request
/// no prefix credit.
fn salted(case: &Case) -> bool {
    let mut tenants = std::collections::BTreeSet::new();
    let cached = case.trace_json["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|w| w["cache"].as_array().into_iter().flatten());
    let events = case.trace_json["events"].as_array().into_iter().flatten();
    for item in cached.chain(events) {
        if let Some(tenant) = item["tenant"].as_str() {
            tenants.insert(tenant);
        }
    }
    tenants.len() > 1
}

/// The driver's salt form in a case of several tenants, no salt in a case of one.
fn salt_in(case: &Case, form: SaltForm) -> SaltForm {
    if salted(case) {
        form
    } else {
        SaltForm::None
    }
}

fn uses_adapters(case: &Case) -> bool {
    case.trace_json["events"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|e| e["adapter"].as_str().is_some_and(|a| a != "base"))
}

#[allow(clippy::too_many_arguments)]
fn vllm_steps(
    case: &Case,
    bounds: &Bounds,
    ids: &[String],
    fleet: &Fleet,
    feed: &mut dyn Feed,
    port: u16,
    model: &str,
    router: &Router,
) -> Result<Response, String> {
    let t = bounds.timeout;
    let ready = wait_until(t, || router.log().contains("Router ready"));
    let healthy = ready
        && wait_until(t, || {
            http::exchange("GET", port, "/health", None, t).is_ok_and(|(s, _)| s == 200)
        });
    if !healthy {
        return Err(format!(
            "vllm-router on port {port} was not ready within {} ms",
            t.as_millis()
        ));
    }
    feed.send_all(bounds.settle, t)?;
    std::thread::sleep(bounds.settle);
    let requests = super::case::requests(case);
    let (judged, loads) = requests.split_last().ok_or("no request")?;
    let body = |request: &Value| {
        let (tokens, tenant, _) = request_fields(request, feed);
        let mut body = json!({"model": model, "prompt": tokens, "max_tokens": 1});
        if salted(case) {
            body["cache_salt"] = json!(tenant);
        }
        body
    };
    let placements = vllm_loads(loads, fleet, ids, port, t, &body)?;
    fleet.hold(false);
    let (status, text) = http::exchange("POST", port, "/v1/completions", Some(&body(judged)), t)?;
    let answer = match case.question {
        Question::Refusal => Answer::Reported(text.to_ascii_lowercase().contains("block")),
        _ => {
            if status != 200 {
                return Err(format!(
                    "POST /v1/completions: status {status}: {}",
                    text.trim()
                ));
            }
            let worker = last_completion(fleet).ok_or("the request reached no worker")?;
            Answer::Worker(ids[worker].clone())
        }
    };
    Ok(Response::Answered {
        answer,
        load_placements: placements,
    })
}

/// The stub that received the last completion request.
fn last_completion(fleet: &Fleet) -> Option<usize> {
    let posts = fleet.posts();
    posts
        .iter()
        .rev()
        .find(|p| p.1 == "/v1/completions")
        .map(|p| p.0)
}

/// How many completion requests the stubs have received.
fn completions(fleet: &Fleet) -> usize {
    fleet
        .posts()
        .iter()
        .filter(|p| p.1 == "/v1/completions")
        .count()
}

/// Sends each load request while the stubs hold them open, and names the worker each
/// reached; the held requests are answered when the fleet is dropped.
fn vllm_loads(
    loads: &[&Value],
    fleet: &Fleet,
    ids: &[String],
    port: u16,
    t: Duration,
    body: &dyn Fn(&Value) -> Value,
) -> Result<Vec<String>, String> {
    fleet.hold(true);
    let mut placements = Vec::new();
    for load in loads {
        let before = completions(fleet);
        let payload = body(load);
        let held = Duration::from_secs(600);
        std::thread::spawn(move || {
            http::exchange("POST", port, "/v1/completions", Some(&payload), held)
        });
        if !wait_until(t, || completions(fleet) > before) {
            return Err("a load request reached no worker".into());
        }
        placements.push(ids[last_completion(fleet).expect("counted")].clone());
    }
    Ok(placements)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str) -> Case {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let path = dir.join(format!("../peers/conformance/cases/{name}.json"));
        super::super::case::load(&path).unwrap()
    }

    #[test]
    fn only_a_case_of_two_tenants_salts_its_blocks_and_requests() {
        // One tenant: no salt, as a deployment of one tenant sends none; a router may
        // rightly give a salted request no prefix credit.
        let one = case("longer_prefix_wins");
        assert!(!salted(&one));
        assert_eq!(salt_in(&one, SaltForm::Vllm), SaltForm::None);
        let two = case("other_tenant_salt");
        assert!(salted(&two));
        assert_eq!(
            salt_in(&two, SaltForm::DynamoTagged),
            SaltForm::DynamoTagged
        );
    }

    #[test]
    fn a_block_size_warning_is_a_report_and_other_lines_are_not() {
        assert!(reports_block_size(
            "2026 WARN listener: block_size 32 does not match 16"
        ));
        assert!(!reports_block_size("INFO block_size=16 registered"));
        assert!(!reports_block_size("WARN decode failed"));
    }

    #[test]
    fn a_select_answer_names_its_worker_and_a_bad_id_is_an_error_not_a_panic() {
        let ids = vec!["w0".to_string(), "w1".to_string()];
        assert_eq!(dynamo_worker(&json!({"worker_id": 2}), &ids).unwrap(), "w1");
        assert!(dynamo_worker(&json!({"worker_id": 0}), &ids).is_err());
        assert!(dynamo_worker(&json!({"worker_id": 3}), &ids).is_err());
        assert!(dynamo_worker(&json!({"error": "x"}), &ids).is_err());
    }

    #[test]
    fn overlap_rows_are_named_by_worker() {
        let ids = vec!["w0".to_string(), "w1".to_string()];
        let scores = json!({"workers": [{"worker_id": 2, "device_blocks": 3}]});
        let blocks = device_blocks(&scores, &ids).unwrap();
        assert_eq!(blocks["w0"], 0);
        assert_eq!(blocks["w1"], 3);
    }

    /// A feed for a case without cache events: endpoints nobody binds, nothing sent.
    struct Silent(BTreeMap<String, String>);

    impl Feed for Silent {
        fn endpoint(&self, worker: &str) -> String {
            self.0[worker].clone()
        }
        fn replay_endpoint(&self, _worker: &str) -> Option<String> {
            None
        }
        fn send_all(&mut self, _join: Duration, _timeout: Duration) -> Result<(), String> {
            Ok(())
        }
        fn request_token_ids(&self, _keys: &[String], prompt_tokens: u64) -> Vec<u64> {
            (1..=prompt_tokens).collect()
        }
    }

    fn silent(case: &Case, _salt: SaltForm) -> Result<Box<dyn Feed>, String> {
        let mut endpoints = BTreeMap::new();
        for id in workers(case) {
            endpoints.insert(id, format!("tcp://127.0.0.1:{}", free_port()?));
        }
        Ok(Box::new(Silent(endpoints)))
    }

    /// Two idle workers, no events: the request is an exact tie.
    fn cold_tie() -> (tempfile::TempDir, Case) {
        let dir = tempfile::tempdir().unwrap();
        let worker = |id: &str| {
            json!({"id": id, "model": "m", "adapters": [], "prefill_rate": 1, "decode_rate": 1,
            "queued_prefill": 0, "active_decode": 0, "observed_tick": 0, "epoch": 0, "cache": []})
        };
        let case = json!({"format": "kvroute-conform-case/1", "name": "cold_tie", "rule": "§5", "report": "none",
            "question": "choice", "expect": ["w0", "w1"], "defect": {"cause": "new_finding", "answer": []},
            "trace": {"format": "kvroute-trace/1", "workers": [worker("w0"), worker("w1")], "events": [
                {"seq": 1, "tick": 1, "type": "request", "id": "q", "tenant": "t", "model": "m", "adapter": "base",
                 "prefix": [], "prompt_tokens": 40, "decode_tokens": 1}]}});
        let path = dir.path().join("cold_tie.json");
        std::fs::write(&path, case.to_string()).unwrap();
        let case = super::super::case::load(&path).unwrap();
        (dir, case)
    }

    /// The pinned environment of `.ci/run conform`; `None` (the test returns) when it
    /// is absent and `KVROUTE_REQUIRE_CONFORM_VENV` is unset, as on a machine that never
    /// built it.
    fn venv() -> Option<std::path::PathBuf> {
        let venv = std::env::var_os("KVROUTE_CONFORM_VENV").map_or_else(
            || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/conform-venv"),
            std::path::PathBuf::from,
        );
        let required = std::env::var_os("KVROUTE_REQUIRE_CONFORM_VENV").is_some();
        if venv.join("bin/python").exists() {
            Some(venv)
        } else {
            assert!(!required, "no conform venv at {}", venv.display());
            None
        }
    }

    fn bounds() -> Bounds {
        Bounds {
            settle: Duration::from_millis(100),
            timeout: Duration::from_secs(30),
        }
    }

    /// Runs the case of an exact tie through the real router `command` and checks the
    /// outcome is `tie` and the router's log shows it started (`started_line`).
    fn assert_a_cold_tie_is_a_tie(router: ConformRouter, command: &[OsString], started_line: &str) {
        let (_dir, case) = cold_tie();
        let (response, log) = run_with(router, command, &case, &bounds(), &silent);
        let outcome = super::super::outcome::classify(&case, &response, &[]);
        assert_eq!(
            outcome,
            super::super::outcome::Outcome::Tie,
            "{response:?}\n{log}"
        );
        assert!(log.contains(started_line), "{log}");
    }

    #[test]
    fn the_real_dynamo_service_is_started_told_its_fleet_asked_and_stopped() {
        let Some(venv) = venv() else { return };
        let command: Vec<OsString> = [
            venv.join("bin/python").into_os_string(),
            "-m".into(),
            "dynamo.select_service".into(),
        ]
        .into();
        assert_a_cold_tie_is_a_tie(
            ConformRouter::DynamoSelect,
            &command,
            "Starting Dynamo selection service",
        );
    }

    #[test]
    fn the_real_vllm_router_is_started_proxies_to_a_stub_and_is_stopped() {
        let Some(venv) = venv() else { return };
        let command: Vec<OsString> = [venv.join("bin/vllm-router").into_os_string()].into();
        assert_a_cold_tie_is_a_tie(ConformRouter::VllmRouter, &command, "Router ready");
    }
}
