//! The two JSON Lines inputs of the engine-event import: the capture (SPEC.md §13.2)
//! and the request log (§13.3), one line at a time.
//!
//! Both are read with serde's derived readers, strict as the trace is: an unknown or
//! repeated member is an error of its line, not silently ignored or overwritten.

use crate::input::limits::JSON_INTEGER_MAX;
use base64::Engine as _;
use serde::Deserialize;

/// One capture line as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaptureLineText {
    endpoint: String,
    topic: Option<String>,
    topic_b64: Option<String>,
    seq: u64,
    payload_b64: String,
    /// Where the message came from (a replay answer or the PUB socket); the import
    /// treats both alike (SPEC.md §13.2), so the value is checked and not kept.
    #[serde(rename = "replayed")]
    _replayed: Option<bool>,
}

/// One received ZeroMQ message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub endpoint: String,
    /// The topic as the worker id shows it: the text, or `b64:` and the base64.
    pub topic: String,
    pub seq: u64,
    pub payload: Vec<u8>,
}

/// The capture line's message, or the reason it is not one.
pub fn capture_line(line: &[u8]) -> Result<Message, String> {
    let text: CaptureLineText =
        serde_json::from_slice(line).map_err(|e| format!("invalid capture line: {e}"))?;
    if text.endpoint.is_empty() {
        return Err("endpoint: expected a non-empty string".to_owned());
    }
    let topic = match (text.topic, text.topic_b64) {
        (Some(topic), None) => topic,
        (None, Some(encoded)) => {
            decode_base64(&encoded, "topic_b64")?;
            format!("b64:{encoded}")
        }
        _ => return Err("expected exactly one of \"topic\" and \"topic_b64\"".to_owned()),
    };
    // Base64 is 4 characters per 3 bytes: a longer text cannot be a payload within
    // the cap, so it is refused before decoding allocates it.
    let cap = super::wire::PAYLOAD_BYTES_MAX;
    if text.payload_b64.len() / 4 * 3 > cap + 3 {
        return Err(format!("payload_b64: payload longer than {cap} bytes"));
    }
    let payload = decode_base64(&text.payload_b64, "payload_b64")?;
    if payload.len() > cap {
        return Err(format!("payload_b64: payload longer than {cap} bytes"));
    }
    Ok(Message {
        endpoint: text.endpoint,
        topic,
        seq: text.seq,
        payload,
    })
}

fn decode_base64(text: &str, member: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("{member}: invalid base64: {e}"))
}

/// One request line as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestLineText {
    arrival_ms: u64,
    id: String,
    model: String,
    tenant: Option<String>,
    adapter: Option<String>,
    token_ids: Vec<u64>,
    output_tokens: u64,
}

/// One request of the log, its defaults not yet applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedRequest {
    pub arrival_ms: u64,
    pub id: String,
    pub model: String,
    pub tenant: Option<String>,
    pub adapter: Option<String>,
    pub token_ids: Vec<u64>,
    pub output_tokens: u64,
}

/// The request line's request, or every reason it is not one.
pub fn request_line(line: &[u8]) -> Result<LoggedRequest, Vec<String>> {
    let text: RequestLineText =
        serde_json::from_slice(line).map_err(|e| vec![format!("invalid request line: {e}")])?;
    let mut reasons = Vec::new();
    for (name, value) in [
        ("id", Some(&text.id)),
        ("model", Some(&text.model)),
        ("tenant", text.tenant.as_ref()),
        ("adapter", text.adapter.as_ref()),
    ] {
        if value.is_some_and(|v| v.is_empty()) {
            reasons.push(format!("{name}: expected a non-empty string"));
        }
    }
    for (name, value) in [
        ("arrival_ms", text.arrival_ms),
        ("output_tokens", text.output_tokens),
    ] {
        if value > JSON_INTEGER_MAX {
            reasons.push(format!(
                "{name}: expected an integer from 0 to {JSON_INTEGER_MAX}, found {value}"
            ));
        }
    }
    if let Some(i) = text.token_ids.iter().position(|&t| t > JSON_INTEGER_MAX) {
        reasons.push(format!(
            "token_ids[{i}]: expected an integer from 0 to {JSON_INTEGER_MAX}, found {}",
            text.token_ids[i]
        ));
    }
    if !reasons.is_empty() {
        return Err(reasons);
    }
    Ok(LoggedRequest {
        arrival_ms: text.arrival_ms,
        id: text.id,
        model: text.model,
        tenant: text.tenant,
        adapter: text.adapter,
        token_ids: text.token_ids,
        output_tokens: text.output_tokens,
    })
}
