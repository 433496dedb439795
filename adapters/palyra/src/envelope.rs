//! What the console stream decoder ([`decode`](crate::decode)) and the ACP commander
//! ([`acp`](crate::acp)) both read from Palyra's JSON: string fields, and command result
//! envelopes. Both depend on this module, and it on neither.

use patchbay_signal::well_known;
use patchbay_signal::{Object, Signal};
use serde_json::Value;

/// A string field of an object, owned.
pub(crate) fn str_field(obj: &Object, key: &str) -> Option<String> {
    obj.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The message and code of an `error` field: an object's `message` (else `default`) and
/// `code`, its other fields put in `meta`; a string as the message; any other value as its
/// JSON text. `None` when there is no `error`.
pub(crate) fn error_of(
    error: Option<Value>,
    default: &str,
    meta: &mut Object,
) -> Option<(String, Option<String>)> {
    Some(match error? {
        Value::Object(err) => {
            let message = str_field(&err, "message").unwrap_or_else(|| default.to_owned());
            let code = str_field(&err, "code");
            for (k, v) in err {
                if k != "message" && k != "code" {
                    meta.insert(k, v);
                }
            }
            (message, code)
        }
        Value::String(text) => (text, None),
        other => (other.to_string(), None),
    })
}

/// The signal for one result envelope (see
/// [`decode_command_result`](crate::decode_command_result)); `run` is the run the command
/// concerned, else one named in the result.
pub(crate) fn command_result_signal(
    source: &str,
    env: &Object,
    ts: i64,
    run: Option<&str>,
) -> Signal {
    let run = run.map(str::to_owned).or_else(|| {
        let result = env.get("result")?;
        ["/run/run_id", "/approval/run_id", "/run_id"]
            .iter()
            .find_map(|p| result.pointer(p).and_then(Value::as_str))
            .map(str::to_owned)
    });
    let ok = env.get("ok").and_then(Value::as_bool);
    let mut signal = if ok == Some(true) {
        Signal::new("palyra.command_result", source, env.clone())
    } else {
        let mut meta = env.clone();
        let error = meta.remove("error");
        let (message, code) = error_of(error, "command failed", &mut meta)
            .unwrap_or_else(|| ("command failed".into(), None));
        let mut payload = Object::new();
        payload.insert(
            "code".into(),
            Value::String(code.unwrap_or_else(|| "command_failed".into())),
        );
        payload.insert("message".into(), Value::String(message));
        payload.insert("severity".into(), Value::String("error".into()));
        let mut s = Signal::new("error", source, payload);
        if !meta.is_empty() {
            s.metadata = Some(meta.into());
        }
        s
    };
    signal.timestamp = ts;
    if let Some(run) = run {
        signal.correlation_id = Some(run.into());
    }
    well_known::repair(&mut signal);
    signal
}
