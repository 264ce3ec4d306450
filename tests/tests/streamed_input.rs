//! Core reads a trace in one pass, member by member (`core/src/input/document.rs`), and
//! puts each member's errors back in the order a walk of the whole tree reports them.
//! The oracle still walks a whole tree, so agreeing with it on documents whose members
//! come in an unusual order, repeat, or carry errors in several members at once (past
//! the 100-line cap) is what shows the order was kept (SPEC.md §2.3). Core's streaming
//! entry point must say the same as its bytes entry point on each.

use kvroute_core::{parse_trace, read_trace, ReadTraceError};
use kvroute_harness::differential::{compare, Agreement};

const LAB: &str = kvroute_core::LAB_TRACE_JSON;

fn corpus() -> Vec<(&'static str, Vec<u8>)> {
    let lab: serde_json::Value = serde_json::from_str(LAB).unwrap();
    let events = serde_json::to_string(&lab["events"]).unwrap();
    let workers = serde_json::to_string(&lab["workers"]).unwrap();
    let policy = serde_json::to_string(&lab["policy"]).unwrap();
    vec![
        (
            "workers after events, policy last",
            format!(
                r#"{{"events":{events},"format":"kvroute-trace/1","limits":"lab","workers":{workers},"policy":{policy}}}"#
            )
            .into_bytes(),
        ),
        (
            "errors in every member, in reverse order",
            br#"{"colour":1,"events":[{"seq":1.0},{"seq":2,"tick":3,"type":"load"}],"workers":[{"id":""},7],"sharing":[{"model":1}],"policy":{"epochs":2},"limits":"huge","format":"kvroute-trace/2","limits":"scale"}"#
                .to_vec(),
        ),
        (
            "more than 100 errors, events before workers",
            format!(
                r#"{{"format":"kvroute-trace/1","events":[{}],"workers":[{}]}}"#,
                vec![r#"{"seq":-1}"#; 70].join(","),
                vec!["1"; 70].join(",")
            )
            .into_bytes(),
        ),
        (
            "repeated events: the first is checked, the second only named",
            format!(
                r#"{{"format":"kvroute-trace/1","events":{events},"workers":{workers},"events":[{{"seq":1e400}}]}}"#
            )
            .into_bytes(),
        ),
        (
            "events an object, workers a number, sharing a string",
            br#"{"events":{"a":[1e3,"x"]},"workers":-0.5E+2,"sharing":"none","format":"kvroute-trace/1"}"#
                .to_vec(),
        ),
        (
            "stage 3 after a streamed pass: an unknown worker in events before workers",
            format!(
                r#"{{"events":[{{"seq":1,"tick":1,"type":"load","worker":"nobody","observed_tick":0,"queued_prefill":0,"active_decode":0}}],"format":"kvroute-trace/1","workers":{workers}}}"#
            )
            .into_bytes(),
        ),
    ]
}

#[test]
fn core_agrees_with_the_oracle_on_member_order_and_repeats() {
    for (name, bytes) in corpus() {
        let agreement = compare(&bytes).unwrap_or_else(|d| panic!("{name}: {d}"));
        if name.starts_with("workers after events") {
            assert!(matches!(agreement, Agreement::Accepted(_)), "{name}");
        } else {
            assert!(matches!(agreement, Agreement::Rejected(_)), "{name}");
        }
        let streamed = match read_trace(bytes.as_slice()) {
            Ok(trace) => Ok(trace),
            Err(ReadTraceError::Invalid(errors)) => Err(errors),
            Err(ReadTraceError::Io(e)) => panic!("{name}: {e}"),
        };
        assert_eq!(streamed, parse_trace(&bytes), "{name}");
    }
}
