//! The part of an OTLP export the decoder reads, as a small typed model, and its reader
//! from OTLP/JSON.
//!
//! The JSON form is the protobuf JSON mapping with OTLP's exceptions: trace and span ids
//! are hex strings (not base64), keys are lowerCamelCase (the original snake_case names
//! are read too), 64-bit integers come as strings or numbers, enums as numbers or names
//! (`SEVERITY_NUMBER_INFO`, `SPAN_KIND_SERVER`, `STATUS_CODE_ERROR`,
//! `AGGREGATION_TEMPORALITY_DELTA`), doubles as numbers or `"NaN"` / `"Infinity"`, and
//! `bytesValue` as base64. Fields the model has no use for are skipped.
//!
//! Everything is bounded by [`Limits`]: attribute lists, strings, arrays, nesting and the
//! number of records are cut at their limit, and each cut is counted in [`Cuts`] (never an
//! error). A body of the wrong shape (not JSON, not an object, `resourceLogs` that is not
//! an array, a logs export where traces were expected) is a [`ModelError`].

use serde_json::{Map, Value};

/// Which of the three OTLP exports a body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SignalKind {
    /// `ExportLogsServiceRequest` (`/v1/logs`).
    Logs,
    /// `ExportTraceServiceRequest` (`/v1/traces`).
    Traces,
    /// `ExportMetricsServiceRequest` (`/v1/metrics`).
    Metrics,
}

impl SignalKind {
    /// The kind an OTLP/HTTP path names (`/v1/logs`, `/v1/traces`, `/v1/metrics`, with
    /// any prefix before them).
    pub fn from_path(path: &str) -> Option<SignalKind> {
        let path = path.split('?').next().unwrap_or(path).trim_end_matches('/');
        if path.ends_with("/v1/logs") {
            Some(SignalKind::Logs)
        } else if path.ends_with("/v1/traces") {
            Some(SignalKind::Traces)
        } else if path.ends_with("/v1/metrics") {
            Some(SignalKind::Metrics)
        } else {
            None
        }
    }

    /// The top-level field of this export in JSON.
    pub fn json_key(self) -> &'static str {
        match self {
            SignalKind::Logs => "resourceLogs",
            SignalKind::Traces => "resourceSpans",
            SignalKind::Metrics => "resourceMetrics",
        }
    }

    /// The kind of a JSON export, from its top-level field (`None` for an object with
    /// none of the three).
    pub fn of_json(value: &Value) -> Option<SignalKind> {
        let obj = value.as_object()?;
        [SignalKind::Logs, SignalKind::Traces, SignalKind::Metrics]
            .into_iter()
            .find(|k| obj.contains_key(k.json_key()) || obj.contains_key(snake(k.json_key())))
    }
}

/// How much of an export the model keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Attributes kept per list (resource, scope, record, data point, kvlist).
    pub max_attributes: usize,
    /// Bytes kept of a string (cut at a character boundary) or a `bytesValue`.
    pub max_string: usize,
    /// Items kept of an `arrayValue`.
    pub max_array: usize,
    /// How deep `arrayValue` / `kvlistValue` nest; deeper values become empty.
    pub max_depth: usize,
    /// Records (log records, spans, data points, span events) kept per export.
    pub max_items: usize,
}

impl Limits {
    /// Counts one more record of an export being read, `taken` so far: `false` (and
    /// counted in `cuts`) beyond `max_items`.
    pub(crate) fn take_item(&self, taken: &mut usize, cuts: &mut Cuts) -> bool {
        if *taken >= self.max_items {
            cuts.items += 1;
            false
        } else {
            *taken += 1;
            true
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_attributes: 128,
            max_string: 16 << 10,
            max_array: 256,
            max_depth: 8,
            max_items: 10_000,
        }
    }
}

/// What was cut to stay within the [`Limits`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cuts {
    /// Attributes dropped beyond `max_attributes`.
    pub attributes: u64,
    /// Strings (and byte values) shortened.
    pub strings: u64,
    /// Array items dropped beyond `max_array`.
    pub array_items: u64,
    /// Values emptied for nesting deeper than `max_depth`.
    pub depth: u64,
    /// Records dropped beyond `max_items`.
    pub items: u64,
}

impl Cuts {
    /// Whether anything was cut.
    pub fn any(&self) -> bool {
        *self != Cuts::default()
    }

    /// The sum of every count.
    pub fn total(&self) -> u64 {
        self.attributes + self.strings + self.array_items + self.depth + self.items
    }
}

/// Why a body is not an OTLP export of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The body is not JSON (or nests deeper than the JSON reader allows).
    #[error("not JSON: {0}")]
    Json(String),
    /// A field has the wrong JSON type.
    #[error("`{path}` must be {expected}")]
    Shape {
        /// Where, as a dot path (`resourceLogs.0.scopeLogs`).
        path: String,
        /// What it must be.
        expected: &'static str,
    },
    /// The body is another kind of export than the one expected.
    #[error("a {found:?} export where {expected:?} was expected")]
    WrongKind {
        /// The kind asked for.
        expected: SignalKind,
        /// The kind the body is.
        found: SignalKind,
    },
    /// The protobuf wire format is broken at `offset`.
    #[error("bad protobuf at byte {offset}: {what}")]
    Protobuf {
        /// The byte offset in the body.
        offset: usize,
        /// What is wrong.
        what: &'static str,
    },
}

/// An attribute value (`AnyValue`).
#[derive(Debug, Clone, PartialEq)]
pub enum AnyValue {
    /// No value set.
    Empty,
    /// `stringValue`.
    Str(String),
    /// `boolValue`.
    Bool(bool),
    /// `intValue`.
    Int(i64),
    /// `doubleValue`.
    Double(f64),
    /// `bytesValue` (decoded).
    Bytes(Vec<u8>),
    /// `arrayValue`.
    Array(Vec<AnyValue>),
    /// `kvlistValue`.
    KvList(Vec<KeyValue>),
}

/// One attribute.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyValue {
    /// Its key.
    pub key: String,
    /// Its value.
    pub value: AnyValue,
}

/// A resource or a scope: its attributes, and for a scope its name and version.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scope {
    /// The instrumentation scope's name (empty for a resource).
    pub name: String,
    /// Its version (empty for a resource).
    pub version: String,
    /// The attributes.
    pub attributes: Vec<KeyValue>,
}

/// One log record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogRecord {
    /// When the event happened (0: unknown).
    pub time_unix_nano: u64,
    /// When the exporter saw it (0: unknown).
    pub observed_time_unix_nano: u64,
    /// `severityNumber` (0: unspecified).
    pub severity_number: i32,
    /// `severityText`.
    pub severity_text: String,
    /// The body.
    pub body: Option<AnyValue>,
    /// The attributes.
    pub attributes: Vec<KeyValue>,
    /// The trace id, lowercase hex (`None` when absent or all zeros).
    pub trace_id: Option<String>,
    /// The span id, lowercase hex (`None` when absent or all zeros).
    pub span_id: Option<String>,
    /// The record's `eventName` field (newer exporters; often empty).
    pub event_name: String,
}

/// A span's event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpanEvent {
    /// When.
    pub time_unix_nano: u64,
    /// Its name.
    pub name: String,
    /// Its attributes.
    pub attributes: Vec<KeyValue>,
}

/// One span.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Span {
    /// The trace id, lowercase hex.
    pub trace_id: Option<String>,
    /// The span id, lowercase hex.
    pub span_id: Option<String>,
    /// The parent's span id, lowercase hex.
    pub parent_span_id: Option<String>,
    /// Its name.
    pub name: String,
    /// `SpanKind` as a number (0 unspecified, 1 internal, 2 server, 3 client, 4 producer,
    /// 5 consumer).
    pub kind: i32,
    /// Start time.
    pub start_time_unix_nano: u64,
    /// End time.
    pub end_time_unix_nano: u64,
    /// Its attributes.
    pub attributes: Vec<KeyValue>,
    /// Its events.
    pub events: Vec<SpanEvent>,
    /// `status.code` (0 unset, 1 ok, 2 error).
    pub status_code: i32,
    /// `status.message`.
    pub status_message: String,
}

/// The value of a metric data point.
#[derive(Debug, Clone, PartialEq)]
pub enum PointValue {
    /// `asInt`.
    Int(i64),
    /// `asDouble`.
    Double(f64),
    /// A histogram, exponential histogram or summary point: its count and sum (min and max
    /// when given).
    Distribution {
        /// How many values.
        count: u64,
        /// Their sum.
        sum: Option<f64>,
        /// The smallest.
        min: Option<f64>,
        /// The largest.
        max: Option<f64>,
    },
    /// No value.
    Empty,
}

impl PointValue {
    /// The point as one number: the value, or a distribution's sum.
    pub fn number(&self) -> Option<f64> {
        match self {
            PointValue::Int(i) => Some(*i as f64),
            PointValue::Double(d) => Some(*d),
            PointValue::Distribution { sum, .. } => *sum,
            PointValue::Empty => None,
        }
    }
}

/// One data point.
#[derive(Debug, Clone, PartialEq)]
pub struct DataPoint {
    /// Its attributes.
    pub attributes: Vec<KeyValue>,
    /// Start of the interval (cumulative: since the series began).
    pub start_time_unix_nano: u64,
    /// End of the interval.
    pub time_unix_nano: u64,
    /// The value.
    pub value: PointValue,
}

/// What kind of metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// `gauge`.
    Gauge,
    /// `sum`.
    Sum,
    /// `histogram`.
    Histogram,
    /// `exponentialHistogram`.
    ExponentialHistogram,
    /// `summary`.
    Summary,
    /// None of them.
    Unknown,
}

impl MetricKind {
    /// Its name in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Gauge => "gauge",
            MetricKind::Sum => "sum",
            MetricKind::Histogram => "histogram",
            MetricKind::ExponentialHistogram => "exponentialHistogram",
            MetricKind::Summary => "summary",
            MetricKind::Unknown => "unknown",
        }
    }
}

/// One metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its unit.
    pub unit: String,
    /// Its kind.
    pub kind: MetricKind,
    /// `aggregationTemporality` (0 unspecified, 1 delta, 2 cumulative).
    pub temporality: i32,
    /// `isMonotonic` (sums).
    pub monotonic: bool,
    /// Its data points.
    pub points: Vec<DataPoint>,
}

/// The items one scope sent.
#[derive(Debug, Clone, PartialEq)]
pub struct ScopeItems<T> {
    /// The scope.
    pub scope: Scope,
    /// Its items (log records, spans or metrics).
    pub items: Vec<T>,
}

/// The items one resource sent.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceItems<T> {
    /// The resource (its attributes; name and version empty).
    pub resource: Scope,
    /// Its scopes.
    pub scopes: Vec<ScopeItems<T>>,
}

/// A decoded export: its resources, and what was cut.
#[derive(Debug, Clone, PartialEq)]
pub struct Export<T> {
    /// Each resource with its scopes and items.
    pub resources: Vec<ResourceItems<T>>,
    /// What was cut to stay within the limits.
    pub cuts: Cuts,
}

impl<T> Default for Export<T> {
    fn default() -> Self {
        Export {
            resources: Vec::new(),
            cuts: Cuts::default(),
        }
    }
}

impl<T> Export<T> {
    /// Each item with its resource and scope, in the order sent.
    pub fn items(&self) -> impl Iterator<Item = (&Scope, &Scope, &T)> {
        self.resources.iter().flat_map(|r| {
            r.scopes.iter().flat_map(move |s| {
                s.items
                    .iter()
                    .map(move |item| (&r.resource, &s.scope, item))
            })
        })
    }
}

/// An `ExportLogsServiceRequest`.
pub type Logs = Export<LogRecord>;
/// An `ExportTraceServiceRequest`.
pub type Traces = Export<Span>;
/// An `ExportMetricsServiceRequest`.
pub type Metrics = Export<Metric>;

/// Any of the three exports.
#[derive(Debug, Clone, PartialEq)]
pub enum Model {
    /// Logs.
    Logs(Logs),
    /// Traces.
    Traces(Traces),
    /// Metrics.
    Metrics(Metrics),
}

impl Model {
    /// Reads an OTLP/JSON body of `kind`.
    pub fn from_json(kind: SignalKind, body: &[u8], limits: &Limits) -> Result<Model, ModelError> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| ModelError::Json(e.to_string()))?;
        Model::from_value(kind, &value, limits)
    }

    /// Reads an OTLP/JSON export already parsed as JSON.
    pub fn from_value(
        kind: SignalKind,
        value: &Value,
        limits: &Limits,
    ) -> Result<Model, ModelError> {
        let obj = value.as_object().ok_or_else(|| ModelError::Shape {
            path: String::new(),
            expected: "an object",
        })?;
        if !obj.contains_key(kind.json_key())
            && !obj.contains_key(snake(kind.json_key()))
            && let Some(found) = SignalKind::of_json(value)
        {
            return Err(ModelError::WrongKind {
                expected: kind,
                found,
            });
        }
        let reader = JsonReader {
            limits,
            cuts: Cuts::default(),
            items: 0,
        };
        Ok(match kind {
            SignalKind::Logs => {
                let read: ItemReader<LogRecord> = |r, v, p| r.log_record(v, p);
                Model::Logs(reader.export(obj, kind, "scopeLogs", "logRecords", read)?)
            }
            SignalKind::Traces => {
                let read: ItemReader<Span> = |r, v, p| r.span(v, p);
                Model::Traces(reader.export(obj, kind, "scopeSpans", "spans", read)?)
            }
            SignalKind::Metrics => {
                let read: ItemReader<Metric> = |r, v, p| r.metric(v, p);
                Model::Metrics(reader.export(obj, kind, "scopeMetrics", "metrics", read)?)
            }
        })
    }

    /// Which kind of export this is.
    pub fn kind(&self) -> SignalKind {
        match self {
            Model::Logs(_) => SignalKind::Logs,
            Model::Traces(_) => SignalKind::Traces,
            Model::Metrics(_) => SignalKind::Metrics,
        }
    }

    /// What was cut.
    pub fn cuts(&self) -> Cuts {
        match self {
            Model::Logs(e) => e.cuts,
            Model::Traces(e) => e.cuts,
            Model::Metrics(e) => e.cuts,
        }
    }
}

/// `resourceLogs` → `resource_logs`.
fn snake(camel: &'static str) -> &'static str {
    match camel {
        "resourceLogs" => "resource_logs",
        "resourceSpans" => "resource_spans",
        "resourceMetrics" => "resource_metrics",
        "scopeLogs" => "scope_logs",
        "scopeSpans" => "scope_spans",
        "scopeMetrics" => "scope_metrics",
        "logRecords" => "log_records",
        "timeUnixNano" => "time_unix_nano",
        "observedTimeUnixNano" => "observed_time_unix_nano",
        "severityNumber" => "severity_number",
        "severityText" => "severity_text",
        "traceId" => "trace_id",
        "spanId" => "span_id",
        "parentSpanId" => "parent_span_id",
        "eventName" => "event_name",
        "startTimeUnixNano" => "start_time_unix_nano",
        "endTimeUnixNano" => "end_time_unix_nano",
        "dataPoints" => "data_points",
        "aggregationTemporality" => "aggregation_temporality",
        "isMonotonic" => "is_monotonic",
        "exponentialHistogram" => "exponential_histogram",
        "asInt" => "as_int",
        "asDouble" => "as_double",
        "stringValue" => "string_value",
        "boolValue" => "bool_value",
        "intValue" => "int_value",
        "doubleValue" => "double_value",
        "bytesValue" => "bytes_value",
        "arrayValue" => "array_value",
        "kvlistValue" => "kvlist_value",
        other => other,
    }
}

/// A field by its lowerCamelCase name or its snake_case one.
fn field<'a>(obj: &'a Map<String, Value>, camel: &'static str) -> Option<&'a Value> {
    obj.get(camel)
        .or_else(|| obj.get(snake(camel)))
        .filter(|v| !v.is_null())
}

struct JsonReader<'l> {
    limits: &'l Limits,
    cuts: Cuts,
    /// Records read so far (against `max_items`).
    items: usize,
}

type ItemReader<T> = fn(&mut JsonReader<'_>, &Map<String, Value>, &str) -> Result<T, ModelError>;

impl JsonReader<'_> {
    /// The whole export of one kind: its resources, then what was cut from them.
    fn export<T>(
        mut self,
        obj: &Map<String, Value>,
        kind: SignalKind,
        scopes_key: &'static str,
        items_key: &'static str,
        read: ItemReader<T>,
    ) -> Result<Export<T>, ModelError> {
        let resources = self.resources(obj, kind, scopes_key, items_key, read)?;
        Ok(Export {
            resources,
            cuts: self.cuts,
        })
    }

    fn resources<T>(
        &mut self,
        obj: &Map<String, Value>,
        kind: SignalKind,
        scopes_key: &'static str,
        items_key: &'static str,
        read: ItemReader<T>,
    ) -> Result<Vec<ResourceItems<T>>, ModelError> {
        let top = kind.json_key();
        let mut resources = Vec::new();
        for (i, r) in array(field(obj, top), top)?.iter().enumerate() {
            let path = format!("{top}.{i}");
            let r = object(r, &path)?;
            let resource = match field(r, "resource") {
                Some(v) => self.scope(object(v, &format!("{path}.resource"))?, &path)?,
                None => Scope::default(),
            };
            let mut scopes = Vec::new();
            let spath = format!("{path}.{scopes_key}");
            for (j, s) in array(field(r, scopes_key), &spath)?.iter().enumerate() {
                let path = format!("{spath}.{j}");
                let s = object(s, &path)?;
                let scope = match field(s, "scope") {
                    Some(v) => self.scope(object(v, &format!("{path}.scope"))?, &path)?,
                    None => Scope::default(),
                };
                let ipath = format!("{path}.{items_key}");
                let mut items = Vec::new();
                for (k, item) in array(field(s, items_key), &ipath)?.iter().enumerate() {
                    let path = format!("{ipath}.{k}");
                    let item = object(item, &path)?;
                    if !self.take_item() {
                        continue;
                    }
                    items.push(read(self, item, &path)?);
                }
                scopes.push(ScopeItems { scope, items });
            }
            resources.push(ResourceItems { resource, scopes });
        }
        Ok(resources)
    }

    /// Counts one more record; `false` (and counted as cut) beyond `max_items`.
    fn take_item(&mut self) -> bool {
        self.limits.take_item(&mut self.items, &mut self.cuts)
    }

    fn scope(&mut self, obj: &Map<String, Value>, path: &str) -> Result<Scope, ModelError> {
        Ok(Scope {
            name: self.string(field(obj, "name")),
            version: self.string(field(obj, "version")),
            attributes: self.attributes(field(obj, "attributes"), path, 0)?,
        })
    }

    fn log_record(
        &mut self,
        obj: &Map<String, Value>,
        path: &str,
    ) -> Result<LogRecord, ModelError> {
        Ok(LogRecord {
            time_unix_nano: uint(field(obj, "timeUnixNano")),
            observed_time_unix_nano: uint(field(obj, "observedTimeUnixNano")),
            severity_number: enumeration(field(obj, "severityNumber"), severity_of),
            severity_text: self.string(field(obj, "severityText")),
            body: match field(obj, "body") {
                Some(v) => Some(self.any_value(v, &format!("{path}.body"), 0)?),
                None => None,
            },
            attributes: self.attributes(field(obj, "attributes"), path, 0)?,
            trace_id: id(field(obj, "traceId")),
            span_id: id(field(obj, "spanId")),
            event_name: self.string(field(obj, "eventName")),
        })
    }

    fn span(&mut self, obj: &Map<String, Value>, path: &str) -> Result<Span, ModelError> {
        let mut events = Vec::new();
        let epath = format!("{path}.events");
        for (i, e) in array(field(obj, "events"), &epath)?.iter().enumerate() {
            let e = object(e, &format!("{epath}.{i}"))?;
            if !self.take_item() {
                continue;
            }
            events.push(SpanEvent {
                time_unix_nano: uint(field(e, "timeUnixNano")),
                name: self.string(field(e, "name")),
                attributes: self.attributes(field(e, "attributes"), &epath, 0)?,
            });
        }
        let status = field(obj, "status").and_then(Value::as_object);
        Ok(Span {
            trace_id: id(field(obj, "traceId")),
            span_id: id(field(obj, "spanId")),
            parent_span_id: id(field(obj, "parentSpanId")),
            name: self.string(field(obj, "name")),
            kind: enumeration(field(obj, "kind"), span_kind_of),
            start_time_unix_nano: uint(field(obj, "startTimeUnixNano")),
            end_time_unix_nano: uint(field(obj, "endTimeUnixNano")),
            attributes: self.attributes(field(obj, "attributes"), path, 0)?,
            events,
            status_code: status.map_or(0, |s| enumeration(field(s, "code"), status_code_of)),
            status_message: self.string(status.and_then(|s| field(s, "message"))),
        })
    }

    fn metric(&mut self, obj: &Map<String, Value>, path: &str) -> Result<Metric, ModelError> {
        let kinds = [
            ("gauge", MetricKind::Gauge),
            ("sum", MetricKind::Sum),
            ("histogram", MetricKind::Histogram),
            ("exponentialHistogram", MetricKind::ExponentialHistogram),
            ("summary", MetricKind::Summary),
        ];
        let mut metric = Metric {
            name: self.string(field(obj, "name")),
            description: self.string(field(obj, "description")),
            unit: self.string(field(obj, "unit")),
            kind: MetricKind::Unknown,
            temporality: 0,
            monotonic: false,
            points: Vec::new(),
        };
        let Some((key, kind, data)) = kinds
            .iter()
            .find_map(|(k, kind)| field(obj, k).map(|d| (*k, *kind, d)))
        else {
            return Ok(metric);
        };
        let dpath = format!("{path}.{key}");
        let data = object(data, &dpath)?;
        metric.kind = kind;
        metric.temporality = enumeration(field(data, "aggregationTemporality"), temporality_of);
        metric.monotonic = field(data, "isMonotonic").and_then(Value::as_bool) == Some(true);
        let ppath = format!("{dpath}.dataPoints");
        for (i, p) in array(field(data, "dataPoints"), &ppath)?.iter().enumerate() {
            let path = format!("{ppath}.{i}");
            let p = object(p, &path)?;
            if !self.take_item() {
                continue;
            }
            let value = match kind {
                MetricKind::Gauge | MetricKind::Sum => {
                    if let Some(v) = field(p, "asInt") {
                        PointValue::Int(int(Some(v)))
                    } else if let Some(v) = field(p, "asDouble") {
                        PointValue::Double(double(Some(v)).unwrap_or(0.0))
                    } else {
                        PointValue::Empty
                    }
                }
                _ => PointValue::Distribution {
                    count: uint(field(p, "count")),
                    sum: double(field(p, "sum")),
                    min: double(field(p, "min")),
                    max: double(field(p, "max")),
                },
            };
            metric.points.push(DataPoint {
                attributes: self.attributes(field(p, "attributes"), &path, 0)?,
                start_time_unix_nano: uint(field(p, "startTimeUnixNano")),
                time_unix_nano: uint(field(p, "timeUnixNano")),
                value,
            });
        }
        Ok(metric)
    }

    fn attributes(
        &mut self,
        value: Option<&Value>,
        path: &str,
        depth: usize,
    ) -> Result<Vec<KeyValue>, ModelError> {
        let apath = format!("{path}.attributes");
        let list = array(value, &apath)?;
        let mut out = Vec::with_capacity(list.len().min(self.limits.max_attributes));
        for (i, kv) in list.iter().enumerate() {
            let kv = object(kv, &format!("{apath}.{i}"))?;
            if out.len() >= self.limits.max_attributes {
                self.cuts.attributes += 1;
                continue;
            }
            let key = self.string(kv.get("key"));
            let value = match kv.get("value").filter(|v| !v.is_null()) {
                Some(v) => self.any_value(v, &format!("{apath}.{i}.value"), depth)?,
                None => AnyValue::Empty,
            };
            out.push(KeyValue { key, value });
        }
        Ok(out)
    }

    fn any_value(
        &mut self,
        value: &Value,
        path: &str,
        depth: usize,
    ) -> Result<AnyValue, ModelError> {
        let obj = object(value, path)?;
        if let Some(v) = field(obj, "stringValue") {
            return Ok(AnyValue::Str(self.string(Some(v))));
        }
        if let Some(v) = field(obj, "boolValue") {
            return Ok(AnyValue::Bool(match v {
                Value::Bool(b) => *b,
                Value::String(s) => s == "true",
                _ => false,
            }));
        }
        if let Some(v) = field(obj, "intValue") {
            return Ok(AnyValue::Int(int(Some(v))));
        }
        if let Some(v) = field(obj, "doubleValue") {
            return Ok(AnyValue::Double(double(Some(v)).unwrap_or(0.0)));
        }
        if let Some(v) = field(obj, "bytesValue") {
            let mut bytes = v.as_str().and_then(base64_decode).unwrap_or_default();
            if bytes.len() > self.limits.max_string {
                bytes.truncate(self.limits.max_string);
                self.cuts.strings += 1;
            }
            return Ok(AnyValue::Bytes(bytes));
        }
        let nested = |key| field(obj, key).map(|v| object(v, &format!("{path}.{key}")));
        if let Some(array_value) = nested("arrayValue") {
            if depth >= self.limits.max_depth {
                self.cuts.depth += 1;
                return Ok(AnyValue::Empty);
            }
            let apath = format!("{path}.arrayValue.values");
            let values = array(field(array_value?, "values"), &apath)?;
            let mut out = Vec::with_capacity(values.len().min(self.limits.max_array));
            for (i, v) in values.iter().enumerate() {
                if out.len() >= self.limits.max_array {
                    self.cuts.array_items += 1;
                    continue;
                }
                out.push(self.any_value(v, &format!("{apath}.{i}"), depth + 1)?);
            }
            return Ok(AnyValue::Array(out));
        }
        if let Some(kvlist) = nested("kvlistValue") {
            if depth >= self.limits.max_depth {
                self.cuts.depth += 1;
                return Ok(AnyValue::Empty);
            }
            let kpath = format!("{path}.kvlistValue");
            // The same shape as an attribute list, under `values`.
            let values = field(kvlist?, "values");
            return Ok(AnyValue::KvList(self.attributes(
                values,
                &kpath,
                depth + 1,
            )?));
        }
        Ok(AnyValue::Empty)
    }

    /// A string field, cut to `max_string` bytes (a non-string is empty).
    fn string(&mut self, value: Option<&Value>) -> String {
        match value {
            Some(Value::String(s)) => self.cut(s),
            _ => String::new(),
        }
    }

    fn cut(&mut self, s: &str) -> String {
        cut_string(s, self.limits.max_string, &mut self.cuts)
    }
}

/// `s` cut to at most `max` bytes at a character boundary (the cut counted).
pub(crate) fn cut_string(s: &str, max: usize, cuts: &mut Cuts) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    cuts.strings += 1;
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

fn array<'a>(value: Option<&'a Value>, path: &str) -> Result<&'a [Value], ModelError> {
    match value {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(ModelError::Shape {
            path: path.to_owned(),
            expected: "an array",
        }),
    }
}

fn object<'a>(value: &'a Value, path: &str) -> Result<&'a Map<String, Value>, ModelError> {
    value.as_object().ok_or_else(|| ModelError::Shape {
        path: path.to_owned(),
        expected: "an object",
    })
}

/// A 64-bit unsigned integer as a number or a decimal string (0 when neither).
fn uint(value: Option<&Value>) -> u64 {
    match value {
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            .unwrap_or(0),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
        _ => 0,
    }
}

/// A 64-bit signed integer as a number or a decimal string (0 when neither).
fn int(value: Option<&Value>) -> i64 {
    match value {
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .unwrap_or(0),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
        _ => 0,
    }
}

/// A double as a number or a string (`"NaN"`, `"Infinity"`, `"-Infinity"`, `"1.5"`).
fn double(value: Option<&Value>) -> Option<f64> {
    match value? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            other => other.trim().parse().ok(),
        },
        _ => None,
    }
}

/// An enum as a number or by its name (`names` gives a name's number).
fn enumeration(value: Option<&Value>, names: fn(&str) -> Option<i32>) -> i32 {
    match value {
        Some(Value::Number(n)) => n.as_i64().and_then(|i| i32::try_from(i).ok()).unwrap_or(0),
        Some(Value::String(s)) => names(s).or_else(|| s.parse().ok()).unwrap_or(0),
        _ => 0,
    }
}

fn severity_of(name: &str) -> Option<i32> {
    let rest = name.strip_prefix("SEVERITY_NUMBER_")?;
    let (level, n) = match rest.find(|c: char| c.is_ascii_digit()) {
        Some(i) => (&rest[..i], rest[i..].parse::<i32>().ok()?),
        None => (rest, 1),
    };
    let base = match level {
        "UNSPECIFIED" => return Some(0),
        "TRACE" => 0,
        "DEBUG" => 4,
        "INFO" => 8,
        "WARN" => 12,
        "ERROR" => 16,
        "FATAL" => 20,
        _ => return None,
    };
    (1..=4).contains(&n).then_some(base + n)
}

fn span_kind_of(name: &str) -> Option<i32> {
    Some(match name {
        "SPAN_KIND_UNSPECIFIED" => 0,
        "SPAN_KIND_INTERNAL" => 1,
        "SPAN_KIND_SERVER" => 2,
        "SPAN_KIND_CLIENT" => 3,
        "SPAN_KIND_PRODUCER" => 4,
        "SPAN_KIND_CONSUMER" => 5,
        _ => return None,
    })
}

fn status_code_of(name: &str) -> Option<i32> {
    Some(match name {
        "STATUS_CODE_UNSET" => 0,
        "STATUS_CODE_OK" => 1,
        "STATUS_CODE_ERROR" => 2,
        _ => return None,
    })
}

fn temporality_of(name: &str) -> Option<i32> {
    Some(match name {
        "AGGREGATION_TEMPORALITY_UNSPECIFIED" => 0,
        "AGGREGATION_TEMPORALITY_DELTA" => 1,
        "AGGREGATION_TEMPORALITY_CUMULATIVE" => 2,
        _ => return None,
    })
}

/// A trace or span id: lowercase hex (OTLP/JSON), or base64 (the plain protobuf JSON
/// mapping, which some exporters send); `None` when absent, empty, all zeros or neither.
fn id(value: Option<&Value>) -> Option<String> {
    let text = value?.as_str()?.trim();
    if text.is_empty() {
        return None;
    }
    let is_hex =
        text.len() % 2 == 0 && text.len() <= 64 && text.bytes().all(|b| b.is_ascii_hexdigit());
    let hex = if is_hex {
        text.to_ascii_lowercase()
    } else {
        let bytes = base64_decode(text).filter(|b| b.len() == 8 || b.len() == 16)?;
        hex_of(&bytes)
    };
    (!hex.bytes().all(|b| b == b'0')).then_some(hex)
}

/// Bytes as lowercase hex.
pub(crate) fn hex_of(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

/// Decodes standard or URL-safe base64, padded or not (whitespace skipped); `None` for
/// anything else.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    let mut padding = 0;
    for b in text.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => {
                padding += 1;
                continue;
            }
            b' ' | b'\n' | b'\r' | b'\t' => continue,
            _ => return None,
        };
        if padding > 0 {
            return None;
        }
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    // Leftover bits must be zero padding of fewer than 8 bits (6 would be a lone char).
    (bits < 6 && padding <= 2).then_some(out)
}

/// Bytes as standard padded base64.
pub fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for bytes in [&b""[..], b"a", b"ab", b"abc", b"abcd", &[0, 255, 128, 7]] {
            let text = base64_encode(bytes);
            assert_eq!(base64_decode(&text).as_deref(), Some(bytes), "{text}");
        }
        assert_eq!(base64_decode("aGk").as_deref(), Some(&b"hi"[..]));
        assert_eq!(base64_decode("a"), None);
        assert_eq!(base64_decode("a*b"), None);
    }

    #[test]
    fn severity_names_give_their_numbers() {
        assert_eq!(severity_of("SEVERITY_NUMBER_INFO"), Some(9));
        assert_eq!(severity_of("SEVERITY_NUMBER_ERROR3"), Some(19));
        assert_eq!(severity_of("SEVERITY_NUMBER_FATAL4"), Some(24));
        assert_eq!(severity_of("SEVERITY_NUMBER_UNSPECIFIED"), Some(0));
        assert_eq!(severity_of("INFO"), None);
    }

    #[test]
    fn ids_are_hex_or_base64_and_zero_is_none() {
        let v = |s: &str| Value::from(s);
        assert_eq!(
            id(Some(&v("ABCDEF0123456789"))).as_deref(),
            Some("abcdef0123456789")
        );
        assert_eq!(id(Some(&v("0000000000000000"))), None);
        assert_eq!(id(Some(&v(""))), None);
        // 8 bytes in base64.
        assert_eq!(
            id(Some(&v("AQIDBAUGBwg="))).as_deref(),
            Some("0102030405060708")
        );
    }
}
