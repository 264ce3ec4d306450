//! The streamed Mooncake import (`kvroute import mooncake`) writes exactly the
//! canonical trace the whole-trace import builds: same bytes, same digest, same errors.

use kvroute_core::harness::{check_mooncake, import_mooncake_each};

use kvroute_core::import::{import_mooncake, MooncakeOptions};
use kvroute_core::input::{Event, EventKind};
use kvroute_core::output::{canonical_trace_bytes, trace_digest, CanonicalTraceStream};
use kvroute_harness::closed_loop::mooncake_path;

fn streamed(lines: &[u8], options: &MooncakeOptions) -> (Vec<u8>, String) {
    let mut stream = CanonicalTraceStream::new(Vec::new()).unwrap();
    let head = import_mooncake_each(lines, options, |event| stream.event(&event).unwrap())
        .expect("the input is accepted");
    assert!(
        head.events.is_empty(),
        "the events were handed on, not kept"
    );
    stream.finish(&head).unwrap()
}

#[test]
fn the_streamed_import_of_the_real_trace_is_the_canonical_trace_of_the_whole_import() {
    let lines = std::fs::read(mooncake_path()).expect("../shared beside the checkout");
    for options in [
        MooncakeOptions::default(),
        MooncakeOptions {
            workers: 3,
            tenant: "t\u{e9}nant \"quoted\"".to_owned(),
            dynamo_block_tokens: Some(64),
            ..MooncakeOptions::default()
        },
    ] {
        let whole = import_mooncake(lines.as_slice(), &options).expect("the real trace imports");
        let (bytes, digest) = streamed(&lines, &options);
        assert!(
            bytes == canonical_trace_bytes(&whole),
            "{options:?}: bytes differ"
        );
        assert_eq!(digest, trace_digest(&whole), "{options:?}");
        let checked = check_mooncake(lines.as_slice(), &options).expect("accepted");
        assert_eq!(checked.workers, whole.workers);
        assert_eq!(checked.policy, whole.policy);
    }
}

#[test]
fn the_check_pass_reports_exactly_the_errors_of_the_import() {
    let lines = std::fs::read(mooncake_path()).expect("../shared beside the checkout");
    let text = String::from_utf8(lines).unwrap();
    // A bad line early, one late, and a timestamp going back.
    let mut bad: Vec<String> = text.lines().take(400).map(str::to_owned).collect();
    bad[3] = bad[3].replacen("\"input_length\": ", "\"input_length\": -", 1);
    bad[399] = r#"{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}"#.into();
    let bad = bad.join("\n");
    let options = MooncakeOptions::default();
    let whole = import_mooncake(bad.as_bytes(), &options).expect_err("rejected");
    assert!(whole.len() >= 2, "{whole:?}");
    assert_eq!(
        check_mooncake(bad.as_bytes(), &options).expect_err("rejected"),
        whole
    );
    let mut handed = 0;
    let each = import_mooncake_each(bad.as_bytes(), &options, |_| handed += 1);
    assert_eq!(each.expect_err("rejected"), whole);
    assert_eq!(handed, 3, "events stop at the first bad line");
}

#[test]
fn the_stream_refuses_an_event_out_of_canonical_order() {
    let options = MooncakeOptions::default();
    let lines =
        b"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n\
{\"timestamp\": 3, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n";
    let trace = import_mooncake(&lines[..], &options).unwrap();
    let mut stream = CanonicalTraceStream::new(Vec::new()).unwrap();
    stream.event(&trace.events[1]).unwrap();
    let earlier: &Event = &trace.events[0];
    assert!(matches!(earlier.kind, EventKind::Request(_)));
    let refused = stream.event(earlier).expect_err("out of order");
    assert!(
        refused.to_string().contains("not in (tick, seq) order"),
        "{refused}"
    );
    // The same event twice is out of order too: (tick, seq) must increase.
    let mut stream = CanonicalTraceStream::new(Vec::new()).unwrap();
    stream.event(earlier).unwrap();
    assert!(stream.event(earlier).is_err());
}
