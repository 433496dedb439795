//! Per-component counters and health, read by `/health`, `/metrics` and the status page.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde::Serialize;

use crate::approvals::Approvals;

/// A component's health state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// Not running yet, or connecting for the first time.
    Starting,
    /// Working.
    Ok,
    /// Working, and waiting for a service or device that has not appeared (a discovery
    /// probe with nothing at its address, a MIDI port not plugged in): not a fault.
    Waiting,
    /// Lost its peer or device, trying again.
    Recovering,
    /// Gave up (a wrong token, attempts exhausted); needs the user.
    Failed,
    /// Finished or shut down.
    Stopped,
}

impl HealthState {
    /// Whether the component works: `ok`, or `waiting` for what it serves to appear.
    pub fn is_working(self) -> bool {
        matches!(self, HealthState::Ok | HealthState::Waiting)
    }
}

/// The daemon as a whole, from its components' states: whether it serves, and which
/// components are done, failed, recovering, starting or waiting. `/health`, `/metrics`, the status
/// page and `patchbay tap` all say this one thing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Overall {
    /// The one word: see [`OverallStatus`].
    pub status: OverallStatus,
    /// Whether at least one component is working (`ok` or `waiting`): the daemon serves,
    /// maybe in part.
    pub serving: bool,
    /// Components that finished (a finite source at its end): not a fault.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub done: Vec<String>,
    /// Components that gave up and need the user.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    /// Components that lost their peer or device and are trying again.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recovering: Vec<String>,
    /// Components not running yet.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub starting: Vec<String>,
    /// Components that work and wait for a service or device to appear: not a fault.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<String>,
}

/// The overall status word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OverallStatus {
    /// Every component still running works (those that finished are `done`, those that
    /// wait for a service or device to appear are `waiting`).
    Ok,
    /// Some components are still starting, none is failing.
    Starting,
    /// Some components failed or are recovering; others work or are on their way.
    Degraded,
    /// Some components failed and none works or is on its way.
    Failed,
    /// Every component finished or shut down.
    Stopped,
}

impl OverallStatus {
    /// Every status, in the order `/metrics` lists them.
    pub const ALL: [OverallStatus; 5] = [
        OverallStatus::Ok,
        OverallStatus::Starting,
        OverallStatus::Degraded,
        OverallStatus::Failed,
        OverallStatus::Stopped,
    ];

    /// The word (`ok`, `starting`, `degraded`, `failed`, `stopped`).
    pub fn as_str(self) -> &'static str {
        match self {
            OverallStatus::Ok => "ok",
            OverallStatus::Starting => "starting",
            OverallStatus::Degraded => "degraded",
            OverallStatus::Failed => "failed",
            OverallStatus::Stopped => "stopped",
        }
    }
}

impl Overall {
    /// The overall state of these components.
    pub fn of(components: &[ComponentSnapshot]) -> Overall {
        let names = |state: HealthState| -> Vec<String> {
            components
                .iter()
                .filter(|c| c.state == state)
                .map(|c| c.name.clone())
                .collect()
        };
        let (done, failed) = (names(HealthState::Stopped), names(HealthState::Failed));
        let (recovering, starting) = (names(HealthState::Recovering), names(HealthState::Starting));
        let waiting = names(HealthState::Waiting);
        let serving = components.iter().any(|c| c.state.is_working());
        let status = if !components.is_empty() && done.len() == components.len() {
            OverallStatus::Stopped
        } else if !failed.is_empty() || !recovering.is_empty() {
            if serving || !recovering.is_empty() || !starting.is_empty() {
                OverallStatus::Degraded
            } else {
                OverallStatus::Failed
            }
        } else if !starting.is_empty() {
            OverallStatus::Starting
        } else {
            OverallStatus::Ok
        };
        Overall {
            status,
            serving,
            done,
            failed,
            recovering,
            starting,
            waiting,
        }
    }

    /// A line that says it (`ok`, `degraded (failed: bus; done: replay)`).
    pub fn summary(&self) -> String {
        let lists = [
            ("failed", &self.failed),
            ("recovering", &self.recovering),
            ("starting", &self.starting),
            ("waiting", &self.waiting),
            ("done", &self.done),
        ];
        let parts: Vec<String> = lists
            .iter()
            .filter(|(_, names)| !names.is_empty())
            .map(|(what, names)| format!("{what}: {}", names.join(", ")))
            .collect();
        match parts.is_empty() {
            true => self.status.as_str().to_owned(),
            false => format!("{} ({})", self.status.as_str(), parts.join("; ")),
        }
    }
}

/// What kind of node a component is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A source (including an output's `.inbound` side).
    Source,
    /// A filter.
    Filter,
    /// An output.
    Output,
}

#[derive(Debug, Clone)]
struct Health {
    state: HealthState,
    detail: Option<String>,
    last_error: Option<String>,
}

/// Counters and health of one component. Counters are monotonic.
#[derive(Debug)]
pub struct ComponentStats {
    name: String,
    type_name: String,
    role: Role,
    /// What it reads; a reload may rewire a component it keeps.
    inputs: Mutex<Vec<String>>,
    /// Signals that came in (read from a peer, or delivered to a filter/output).
    pub received: AtomicU64,
    /// Signals passed on (into the graph, out of a filter, written by an output).
    pub sent: AtomicU64,
    /// Signals dropped by a decision (a full queue, a filter's drop).
    pub dropped: AtomicU64,
    /// Unusable input (malformed frames, bad lines, refused signals).
    pub bad_input: AtomicU64,
    /// Signals refused at ingest: the graph stayed full past the ingest timeout, and the
    /// sender was told so.
    pub refused: AtomicU64,
    /// Times the component panicked (each one caught, counted and restarted).
    pub panics: AtomicU64,
    health: Mutex<Health>,
    gauges: Mutex<BTreeMap<String, f64>>,
    /// What each gauge measures (`# HELP` in `/metrics`), as the component describes them.
    gauge_help: Mutex<&'static [(&'static str, &'static str)]>,
    /// HTTP requests a listening component refused, by reason (`unauthorized`, …).
    http_refused: Mutex<BTreeMap<&'static str, u64>>,
}

/// A snapshot of one component, as `/health` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ComponentSnapshot {
    /// Component name (`ui`, `ui.inbound`, `tokens`).
    pub name: String,
    /// Component type (`sidecar`, `throttle`, …).
    #[serde(rename = "type")]
    pub type_name: String,
    /// Source, filter or output.
    pub role: Role,
    /// What it reads (`tokens`, `gate.dropped`): the wiring, for the status page.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    /// Health state.
    pub state: HealthState,
    /// What it is doing (`retrying in 4 s`), if anything worth saying.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The last error, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Signals in.
    pub received: u64,
    /// Signals out.
    pub sent: u64,
    /// Signals dropped.
    pub dropped: u64,
    /// Bad input.
    pub bad_input: u64,
    /// Signals refused at ingest (the graph stayed full).
    pub refused: u64,
    /// Panics caught (the component was restarted).
    pub panics: u64,
    /// Component-specific gauges (`clients`, `lagged_clients`, …).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub gauges: BTreeMap<String, f64>,
    /// What the gauges measure, by name.
    #[serde(skip)]
    pub gauge_help: &'static [(&'static str, &'static str)],
    /// HTTP requests refused, by reason.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub http_refused: BTreeMap<&'static str, u64>,
}

impl ComponentStats {
    /// Stats for a new component, in state `starting`.
    pub fn new(name: impl Into<String>, type_name: impl Into<String>, role: Role) -> Self {
        ComponentStats {
            name: name.into(),
            type_name: type_name.into(),
            role,
            inputs: Mutex::new(Vec::new()),
            received: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            bad_input: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            health: Mutex::new(Health {
                state: HealthState::Starting,
                detail: None,
                last_error: None,
            }),
            gauges: Mutex::new(BTreeMap::new()),
            gauge_help: Mutex::new(&[]),
            http_refused: Mutex::new(BTreeMap::new()),
        }
    }

    /// Counts an HTTP request refused for `reason` (`unauthorized`, `forbidden_origin`).
    pub fn http_refused(&self, reason: &'static str) {
        *self
            .http_refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(reason)
            .or_default() += 1;
    }

    /// The same, reading `inputs` (node names, `NAME.dropped` for a drop port).
    pub fn with_inputs(self, inputs: Vec<String>) -> Self {
        self.set_inputs(inputs);
        self
    }

    /// Replaces what the component reads (a reload rewired it).
    pub fn set_inputs(&self, inputs: Vec<String>) {
        *self.inputs.lock().unwrap_or_else(|e| e.into_inner()) = inputs;
    }

    /// The component's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The component's type.
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// Adds to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Sets the health state, with an optional detail (replacing the previous one).
    pub fn set_state(&self, state: HealthState, detail: Option<String>) {
        let mut h = self.health.lock().unwrap_or_else(|e| e.into_inner());
        if h.state != state {
            tracing::debug!(component = %self.name, ?state, "health");
        }
        h.state = state;
        h.detail = detail;
    }

    /// Records an error (kept as `last_error`) without changing the state.
    pub fn record_error(&self, error: impl std::fmt::Display) {
        let message = error.to_string();
        tracing::warn!(component = %self.name, "{message}");
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_error = Some(message);
    }

    /// Counts one bad input and records why.
    pub fn bad_input(&self, error: impl std::fmt::Display) {
        Self::add(&self.bad_input, 1);
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_error = Some(error.to_string());
    }

    /// The current health state.
    pub fn state(&self) -> HealthState {
        self.health.lock().unwrap_or_else(|e| e.into_inner()).state
    }

    /// Says what the component's gauges measure: `(name, help)` pairs, shown as `# HELP`
    /// in `/metrics` (a gauge without one gets a generic line).
    pub fn describe_gauges(&self, help: &'static [(&'static str, &'static str)]) {
        *self.gauge_help.lock().unwrap_or_else(|e| e.into_inner()) = help;
    }

    /// Sets a component-specific gauge.
    pub fn set_gauge(&self, name: &str, value: f64) {
        self.gauges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_owned(), value);
    }

    /// A consistent-enough snapshot (each counter read once).
    pub fn snapshot(&self) -> ComponentSnapshot {
        let h = self
            .health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        ComponentSnapshot {
            name: self.name.clone(),
            type_name: self.type_name.clone(),
            role: self.role,
            inputs: self
                .inputs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            state: h.state,
            detail: h.detail,
            last_error: h.last_error,
            received: self.received.load(Ordering::Relaxed),
            sent: self.sent.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            bad_input: self.bad_input.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            panics: self.panics.load(Ordering::Relaxed),
            gauges: self
                .gauges
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            gauge_help: *self.gauge_help.lock().unwrap_or_else(|e| e.into_inner()),
            http_refused: self
                .http_refused
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}

/// Every component of a running graph, and its config generation.
#[derive(Debug, Default)]
pub struct Telemetry {
    /// In graph order; a reload replaces the list (the stats of a kept component are
    /// the same `Arc`, so its counters go on).
    components: RwLock<Vec<Arc<ComponentStats>>>,
    config: Mutex<ConfigState>,
    /// The approvals the graph's agents wait on.
    approvals: Arc<Approvals>,
}

/// Which config the graph runs, and how the last reload went (shown in `/health`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ConfigState {
    /// 1 for the config the daemon started with, one more for each applied reload.
    pub generation: u64,
    /// The last reload attempt, if there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_reload: Option<ReloadRecord>,
}

/// How a reload attempt ended.
#[derive(Debug, Clone, Serialize)]
pub struct ReloadRecord {
    /// When it was attempted (Unix ms).
    pub at_ms: i64,
    /// Whether the new config runs now.
    pub ok: bool,
    /// What changed (`2 kept, 1 rebuilt, 1 added, 0 removed`) or why it was refused.
    pub outcome: String,
}

impl Telemetry {
    /// Registers a component and returns its stats handle.
    pub fn register(&mut self, stats: ComponentStats) -> Arc<ComponentStats> {
        let stats = Arc::new(stats);
        self.components
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::clone(&stats));
        stats
    }

    /// The approvals the graph's agents wait on (one board for every agent component).
    pub fn approvals(&self) -> &Arc<Approvals> {
        &self.approvals
    }

    /// Replaces the component list (after a reload).
    pub fn replace(&self, components: Vec<Arc<ComponentStats>>) {
        *self.components.write().unwrap_or_else(|e| e.into_inner()) = components;
    }

    /// All components, in graph order.
    pub fn components(&self) -> Vec<Arc<ComponentStats>> {
        self.components
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Snapshots of all components.
    pub fn snapshot(&self) -> Vec<ComponentSnapshot> {
        self.components().iter().map(|c| c.snapshot()).collect()
    }

    /// The daemon as a whole (see [`Overall`]).
    pub fn overall(&self) -> Overall {
        Overall::of(&self.snapshot())
    }

    /// A snapshot of the component named `name` (`ui`, `ui.inbound`), if the graph has one:
    /// how a program (or a test) reads one component's health and counters.
    pub fn component(&self, name: &str) -> Option<ComponentSnapshot> {
        self.components()
            .iter()
            .find(|c| c.name() == name)
            .map(|c| c.snapshot())
    }

    /// The config generation and the last reload.
    pub fn config(&self) -> ConfigState {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records a reload attempt; an applied one starts the next generation.
    pub fn record_reload(&self, ok: bool, outcome: String) {
        let mut c = self.config.lock().unwrap_or_else(|e| e.into_inner());
        if ok {
            c.generation += 1;
        }
        c.last_reload = Some(ReloadRecord {
            at_ms: patchbay_signal::now_ms(),
            ok,
            outcome,
        });
    }

    /// Starts generation 1 (the config the graph started with).
    pub(crate) fn start_generation(&self) {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .generation = 1;
    }

    /// The components in Prometheus text exposition format.
    pub fn prometheus(&self) -> String {
        use std::fmt::Write;
        let snaps = self.snapshot();
        let mut out = String::new();
        let config = self.config();
        let _ = writeln!(
            out,
            "# HELP patchbay_config_generation The config generation running (1 at start, +1 per applied reload).\n# TYPE patchbay_config_generation gauge\npatchbay_config_generation {}",
            config.generation
        );
        let _ = writeln!(
            out,
            "# HELP patchbay_config_reload_ok Whether the last reload was applied (1) or refused (0); 1 before any.\n# TYPE patchbay_config_reload_ok gauge\npatchbay_config_reload_ok {}",
            u8::from(config.last_reload.as_ref().is_none_or(|r| r.ok))
        );
        type Counter = (&'static str, &'static str, fn(&ComponentSnapshot) -> u64);
        let counters: [Counter; 6] = [
            (
                "patchbay_received_total",
                "Signals received by a component.",
                |s| s.received,
            ),
            (
                "patchbay_sent_total",
                "Signals passed on by a component.",
                |s| s.sent,
            ),
            (
                "patchbay_dropped_total",
                "Signals dropped by a component's configured decision.",
                |s| s.dropped,
            ),
            (
                "patchbay_bad_input_total",
                "Unusable inputs reported by a component.",
                |s| s.bad_input,
            ),
            (
                "patchbay_refused_total",
                "Signals refused at ingest because the graph stayed full past the ingest timeout.",
                |s| s.refused,
            ),
            (
                "patchbay_panics_total",
                "Panics caught in a component (it was restarted).",
                |s| s.panics,
            ),
        ];
        for (metric, help, get) in counters {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} counter");
            for s in &snaps {
                let _ = writeln!(
                    out,
                    "{metric}{{component=\"{}\",type=\"{}\"}} {}",
                    escape(&s.name),
                    escape(&s.type_name),
                    get(s)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP patchbay_http_refused_total HTTP requests a listening component refused, by reason (unauthorized, forbidden_origin, forbidden_host, too_many_connections, header_timeout).\n# TYPE patchbay_http_refused_total counter"
        );
        for s in &snaps {
            for (reason, n) in &s.http_refused {
                let _ = writeln!(
                    out,
                    "patchbay_http_refused_total{{component=\"{}\",reason=\"{reason}\"}} {n}",
                    escape(&s.name)
                );
            }
        }
        let overall = Overall::of(&snaps);
        let _ = writeln!(
            out,
            "# HELP patchbay_status The daemon's overall status: 1 for the one it is in (ok, starting, degraded, failed, stopped).\n# TYPE patchbay_status gauge"
        );
        for status in OverallStatus::ALL {
            let _ = writeln!(
                out,
                "patchbay_status{{status=\"{}\"}} {}",
                status.as_str(),
                u8::from(status == overall.status)
            );
        }
        let _ = writeln!(
            out,
            "# HELP patchbay_serving Whether the daemon serves: 1 when at least one component works.\n# TYPE patchbay_serving gauge\npatchbay_serving {}",
            u8::from(overall.serving)
        );
        let _ = writeln!(
            out,
            "# HELP patchbay_up Component health: 1 when it works (ok, or waiting for a service or device to appear), 0 otherwise.\n# TYPE patchbay_up gauge"
        );
        for s in &snaps {
            let up = u8::from(s.state.is_working());
            let _ = writeln!(out, "patchbay_up{{component=\"{}\"}} {up}", escape(&s.name));
        }
        let mut gauges: BTreeMap<&str, Vec<(&str, f64)>> = BTreeMap::new();
        let mut help: BTreeMap<&str, &str> = BTreeMap::new();
        for s in &snaps {
            for (g, v) in &s.gauges {
                gauges.entry(g).or_default().push((&s.name, *v));
            }
            help.extend(s.gauge_help.iter().copied());
        }
        for (g, values) in gauges {
            match help.get(g) {
                Some(text) => {
                    let _ = writeln!(out, "# HELP patchbay_{g} {text}");
                }
                None => {
                    let _ = writeln!(out, "# HELP patchbay_{g} The `{g}` gauge of a component.");
                }
            }
            let _ = writeln!(out, "# TYPE patchbay_{g} gauge");
            for (name, v) in values {
                let _ = writeln!(out, "patchbay_{g}{{component=\"{}\"}} {v}", escape(name));
            }
        }
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(states: &[(&str, HealthState)]) -> Overall {
        let snaps: Vec<ComponentSnapshot> = states
            .iter()
            .map(|(name, state)| {
                let stats = ComponentStats::new(*name, "t", Role::Source);
                stats.set_state(*state, None);
                stats.snapshot()
            })
            .collect();
        Overall::of(&snaps)
    }

    #[test]
    fn a_finished_source_beside_a_serving_sidecar_is_done_not_stopped() {
        use HealthState::*;
        let overall = graph(&[("replay", Stopped), ("ui", Ok)]);
        assert_eq!(overall.status, OverallStatus::Ok);
        assert!(overall.serving);
        assert_eq!(overall.done, ["replay"]);
        assert_eq!(overall.summary(), "ok (done: replay)");
    }

    #[test]
    fn each_mix_of_states_has_its_word() {
        use HealthState::*;
        type Case<'a> = (&'a [(&'a str, HealthState)], OverallStatus, bool);
        let cases: [Case; 12] = [
            (&[], OverallStatus::Ok, false),
            (&[("a", Ok), ("b", Ok)], OverallStatus::Ok, true),
            (&[("a", Ok), ("b", Starting)], OverallStatus::Starting, true),
            (
                &[("a", Ok), ("b", Recovering)],
                OverallStatus::Degraded,
                true,
            ),
            (&[("a", Ok), ("b", Failed)], OverallStatus::Degraded, true),
            (&[("a", Recovering)], OverallStatus::Degraded, false),
            (
                &[("a", Failed), ("b", Stopped)],
                OverallStatus::Failed,
                false,
            ),
            (
                &[("a", Failed), ("b", Starting)],
                OverallStatus::Degraded,
                false,
            ),
            (
                &[("a", Stopped), ("b", Stopped)],
                OverallStatus::Stopped,
                false,
            ),
            (&[("a", Ok), ("b", Waiting)], OverallStatus::Ok, true),
            (&[("a", Waiting)], OverallStatus::Ok, true),
            (
                &[("a", Failed), ("b", Waiting)],
                OverallStatus::Degraded,
                true,
            ),
        ];
        for (states, status, serving) in cases {
            let overall = graph(states);
            assert_eq!(
                (overall.status, overall.serving),
                (status, serving),
                "{states:?}"
            );
        }
        let overall = graph(&[("bus", Failed), ("ui", Ok), ("replay", Stopped)]);
        assert_eq!(overall.summary(), "degraded (failed: bus; done: replay)");
        let overall = graph(&[("ollama", Waiting), ("ui", Ok)]);
        assert_eq!(overall.summary(), "ok (waiting: ollama)");
    }

    #[test]
    fn metrics_say_the_overall_status() {
        let mut telemetry = Telemetry::default();
        let done = telemetry.register(ComponentStats::new("replay", "file", Role::Source));
        done.set_state(HealthState::Stopped, None);
        let ui = telemetry.register(ComponentStats::new("ui", "sidecar", Role::Output));
        ui.set_state(HealthState::Ok, None);
        let text = telemetry.prometheus();
        assert!(
            text.contains("patchbay_status{status=\"ok\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("patchbay_status{status=\"stopped\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("patchbay_serving 1\n"), "{text}");
    }
}
