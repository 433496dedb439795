//! patchbay's hooks in Gemini CLI's settings: merged into an empty file and into the
//! recorded one, installed twice, removed.

use patchbay_gemini_cli::settings::{
    EVENTS, MARK_NAME, REPORT_TIMEOUT_MS, SettingsError, install, installed, is_ours, uninstall,
};
use serde_json::{Value, json};

const COMMAND: &str = "patchbay hooks emit --agent gemini --url http://127.0.0.1:7880/hook";

fn recorded() -> String {
    let path = format!(
        "{}/tests/fixtures/gemini-settings.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path).unwrap()
}

fn value(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

fn ours(settings: &Value, event: &str) -> Vec<Value> {
    settings["hooks"][event]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default())
        .filter(is_ours)
        .collect()
}

#[test]
fn into_an_empty_file() {
    for existing in [None, Some(""), Some("  \n"), Some("{}")] {
        let text = install(existing, COMMAND, None).unwrap();
        assert!(text.ends_with("}\n"));
        let settings = value(&text);
        assert_eq!(settings["hooksConfig"], json!({"enabled": true}));
        let events: Vec<_> = settings["hooks"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(events, EVENTS);
        for event in EVENTS {
            assert_eq!(
                settings["hooks"][event],
                json!([{"hooks": [{"type": "command", "command": COMMAND, "name": MARK_NAME,
                    "timeout": REPORT_TIMEOUT_MS}]}]),
                "{event}"
            );
        }
        assert_eq!(installed(&text).unwrap(), EVENTS);
        // Removing them leaves what patchbay does not own.
        assert_eq!(
            value(&uninstall(&text).unwrap()),
            json!({"hooksConfig": {"enabled": true}})
        );
    }
}

#[test]
fn into_the_recorded_settings_keeping_the_users() {
    let before = value(&recorded());
    let text = install(Some(&recorded()), COMMAND, Some(35)).unwrap();
    let settings = value(&text);

    // Every key of the user's stays, in its place.
    let keys: Vec<_> = settings.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        [
            "security",
            "general",
            "privacy",
            "telemetry",
            "hooksConfig",
            "hooks"
        ]
    );
    for key in ["security", "general", "privacy", "telemetry", "hooksConfig"] {
        assert_eq!(settings[key], before[key], "{key}");
    }
    // The user's hooks stay first, patchbay's come after them; the events keep their order.
    let events: Vec<_> = settings["hooks"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let before_events: Vec<_> = before["hooks"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(events, before_events);
    for event in EVENTS {
        let groups = settings["hooks"][event].as_array().unwrap();
        assert_eq!(groups.len(), 2, "{event}");
        assert_eq!(groups[0], before["hooks"][event][0], "{event}");
        let hook = &groups[1]["hooks"][0];
        assert_eq!(hook["name"], "patchbay");
        assert_eq!(hook["command"], COMMAND);
        // Milliseconds; the gate's time for BeforeTool.
        let expected = if event == "BeforeTool" { 35_000 } else { 5_000 };
        assert_eq!(hook["timeout"], expected, "{event}");
    }
    assert_eq!(settings["hooks"]["BeforeTool"][0]["matcher"], ".*");

    // Installing again (with other options) replaces, never duplicates.
    let again = install(Some(&text), COMMAND, Some(35)).unwrap();
    assert_eq!(again, text);
    let other = install(Some(&text), "patchbay hooks emit --url http://x", None).unwrap();
    let other = value(&other);
    for event in EVENTS {
        let mine = ours(&other, event);
        assert_eq!(mine.len(), 1, "{event}");
        assert_eq!(mine[0]["command"], "patchbay hooks emit --url http://x");
        assert_eq!(mine[0]["timeout"], 5_000);
    }

    // Uninstalling leaves exactly the user's settings.
    let removed = uninstall(&text).unwrap();
    assert_eq!(value(&removed), before);
    assert_eq!(uninstall(&removed).unwrap(), removed);
    assert!(installed(&removed).unwrap().is_empty());
}

#[test]
fn only_hooks_named_patchbay_are_patchbays() {
    let user = r#"{
  "hooks": {
    "enabled": true,
    "disabled": ["old"],
    "BeforeTool": [
      {"matcher": "write_file", "hooks": [
        {"type": "command", "command": "audit.sh", "name": "audit"},
        {"type": "command", "command": "patchbay hooks emit", "name": "patchbay"}
      ]}
    ],
    "AfterAgent": [
      {"hooks": [{"type": "command", "command": "patchbay hooks emit"}]}
    ]
  },
  "hooksConfig": {"enabled": false, "notifications": true}
}"#;
    let text = install(Some(user), COMMAND, None).unwrap();
    let settings = value(&text);
    // The old-style keys inside `hooks` are left alone; `hooksConfig` is switched on.
    assert_eq!(settings["hooks"]["enabled"], true);
    assert_eq!(settings["hooks"]["disabled"], json!(["old"]));
    assert_eq!(
        settings["hooksConfig"],
        json!({"enabled": true, "notifications": true})
    );
    // In a group shared with the user's hook, ours is taken out and the user's kept.
    assert_eq!(
        settings["hooks"]["BeforeTool"][0],
        json!({"matcher": "write_file", "hooks": [
            {"type": "command", "command": "audit.sh", "name": "audit"}]})
    );
    assert_eq!(ours(&settings, "BeforeTool").len(), 1);
    // A hook running patchbay but not named so is the user's.
    assert_eq!(settings["hooks"]["AfterAgent"].as_array().unwrap().len(), 2);

    let removed = value(&uninstall(&text).unwrap());
    assert_eq!(
        removed["hooks"]["BeforeTool"],
        json!([{"matcher": "write_file", "hooks": [
            {"type": "command", "command": "audit.sh", "name": "audit"}]}])
    );
    assert_eq!(
        removed["hooks"]["AfterAgent"],
        json!([{"hooks": [{"type": "command", "command": "patchbay hooks emit"}]}])
    );
    let events: Vec<_> = removed["hooks"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(events, ["enabled", "disabled", "BeforeTool", "AfterAgent"]);
}

#[test]
fn unusable_settings_are_refused_with_their_place() {
    let err = install(Some("{\n  \"a\": 1,\n  oops\n}"), COMMAND, None).unwrap_err();
    assert!(
        matches!(
            err,
            SettingsError::Syntax {
                line: 3,
                col: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("3:3: not valid JSON"), "{err}");
    // Gemini CLI accepts comments; patchbay does not rewrite such a file.
    assert!(matches!(
        install(Some("{ // mine\n}"), COMMAND, None),
        Err(SettingsError::Syntax { .. })
    ));
    let err = install(Some("{\"x\": 1,\n \"hooks\": []}"), COMMAND, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "2:2: `hooks` is not an object; left unchanged"
    );
    let err = uninstall("{\"hooks\": {\"BeforeTool\": {}}}").unwrap_err();
    assert_eq!(
        err.to_string(),
        "1:12: `hooks.BeforeTool` is not an array; left unchanged"
    );
    let err = install(Some("{\"hooksConfig\": true}"), COMMAND, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "1:2: `hooksConfig` is not an object; left unchanged"
    );
    let err = install(Some("[1]"), COMMAND, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "1:1: the settings are not a JSON object; left unchanged"
    );
    assert!(uninstall("nope").is_err());
    assert!(installed("nope").is_err());
    // Odd groups are kept as they are.
    let odd = r#"{"hooks": {"BeforeTool": [5, {"hooks": "x"}, {"matcher": "y"}]}}"#;
    let text = install(Some(odd), COMMAND, None).unwrap();
    assert_eq!(
        value(&uninstall(&text).unwrap()),
        json!({"hooks": {"BeforeTool": [5, {"hooks": "x"}, {"matcher": "y"}]},
            "hooksConfig": {"enabled": true}})
    );
}
