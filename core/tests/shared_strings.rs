//! The validated trace holds one copy of each repeated string, so memory follows the
//! distinct strings: the readers (`parse_trace`, `read_trace`, the Mooncake import) hand
//! out shared `Arc<str>`s, so a namespace, worker reference or prefix key named again costs
//! a pointer. These tests check the sharing itself (`Arc::ptr_eq`), not only equal text,
//! since equal text is what the `String` fields they replaced already gave.

use kvroute_core::import::{import_mooncake, MooncakeOptions};
use kvroute_core::input::{CacheOp, EventKind, Request, Trace};
use kvroute_core::{parse_trace, read_trace};
use std::sync::Arc;

const TRACE: &str = r#"{"format":"kvroute-trace/1",
 "sharing":[{"model":"m","adapter":"base","tenants":["acme","beta"]}],
 "workers":[
  {"id":"w0","model":"m","adapters":["lora"],"prefill_rate":16,"decode_rate":4,"queued_prefill":0,"active_decode":0,"observed_tick":0,"epoch":0,
   "cache":[{"tenant":"acme","model":"m","adapter":"base","key":"k0","tokens":64}]},
  {"id":"w1","model":"m","adapters":["lora"],"prefill_rate":16,"decode_rate":4,"queued_prefill":0,"active_decode":0,"observed_tick":0,"epoch":0,"cache":[]}],
 "events":[
  {"seq":1,"tick":0,"type":"cache","op":"store","worker":"w1","epoch":1,"tenant":"acme","model":"m","adapter":"base","segments":[{"key":"k0","tokens":64},{"key":"k1","tokens":64}]},
  {"seq":2,"tick":1,"type":"request","id":"r2","tenant":"acme","model":"m","adapter":"base","prefix":[{"key":"k0","tokens":64},{"key":"k1","tokens":64}],"prompt_tokens":200,"decode_tokens":4},
  {"seq":3,"tick":2,"type":"request","id":"r3","tenant":"acme","model":"m","adapter":"base","prefix":[{"key":"k0","tokens":64},{"key":"k1","tokens":64}],"prompt_tokens":200,"decode_tokens":4},
  {"seq":4,"tick":3,"type":"cache","op":"evict","worker":"w1","epoch":2,"tenant":"acme","model":"m","adapter":"base","keys":["k1"]},
  {"seq":5,"tick":4,"type":"load","worker":"w1","observed_tick":4,"queued_prefill":0,"active_decode":0}]}"#;

fn request(trace: &Trace, seq: u64) -> &Request {
    match &trace.events.iter().find(|e| e.seq == seq).unwrap().kind {
        EventKind::Request(request) => request,
        other => panic!("event {seq} is not a request: {other:?}"),
    }
}

fn assert_shared(what: &str, a: &Arc<str>, b: &Arc<str>) {
    assert_eq!(a, b, "{what}: the same text");
    assert!(Arc::ptr_eq(a, b), "{what}: one shared copy, found two");
}

fn check(trace: &Trace) {
    let (r2, r3) = (request(trace, 2), request(trace, 3));
    assert_shared("tenant", &r2.namespace.tenant, &r3.namespace.tenant);
    assert_shared("model", &r2.namespace.model, &r3.namespace.model);
    assert_shared("adapter", &r2.namespace.adapter, &r3.namespace.adapter);
    for (a, b) in r2.prefix.iter().zip(&r3.prefix) {
        assert_shared("prefix key", &a.key, &b.key);
    }
    let EventKind::Cache {
        worker: store_worker,
        op: CacheOp::Store { segments, .. },
        ..
    } = &trace.events[0].kind
    else {
        panic!("event 1 is a store");
    };
    let EventKind::Cache {
        worker: evict_worker,
        op: CacheOp::Evict { keys, .. },
        ..
    } = &trace.events[3].kind
    else {
        panic!("event 4 is an evict");
    };
    let EventKind::Load {
        worker: load_worker,
        ..
    } = &trace.events[4].kind
    else {
        panic!("event 5 is a load");
    };
    assert_shared("worker reference", store_worker, evict_worker);
    assert_shared("worker reference", store_worker, load_worker);
    assert_shared(
        "store key and request key",
        &segments[1].key,
        &r2.prefix[1].key,
    );
    assert_shared("evict key and request key", &keys[0], &r2.prefix[1].key);
    let (w0, w1) = (&trace.workers[0], &trace.workers[1]);
    assert_shared("worker model", &w0.model, &w1.model);
    assert_shared("worker adapter", &w0.adapters[0], &w1.adapters[0]);
    assert_shared(
        "cache entry model and worker model",
        &w0.cache[0].namespace.model,
        &w0.model,
    );
    // Request ids are unique in a valid trace: each is its own string.
    assert!(!Arc::ptr_eq(&r2.id, &r3.id));
}

#[test]
fn parse_trace_shares_repeated_strings() {
    check(&parse_trace(TRACE.as_bytes()).unwrap());
}

#[test]
fn read_trace_shares_repeated_strings() {
    check(&read_trace(TRACE.as_bytes()).unwrap());
}

#[test]
fn the_mooncake_import_shares_block_keys_and_the_namespace() {
    let lines = concat!(
        r#"{"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [7, 8]}"#,
        "\n",
        r#"{"timestamp": 5, "input_length": 1024, "output_length": 4, "hash_ids": [7, 9]}"#,
        "\n",
    );
    let trace = import_mooncake(lines.as_bytes(), &MooncakeOptions::default()).unwrap();
    let (a, b) = (request(&trace, 1), request(&trace, 2));
    assert_shared("block key b7", &a.prefix[0].key, &b.prefix[0].key);
    assert_ne!(a.prefix[1].key, b.prefix[1].key);
    assert_shared("tenant", &a.namespace.tenant, &b.namespace.tenant);
    assert_shared("model", &a.namespace.model, &trace.workers[0].model);
}
