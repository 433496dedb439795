//! The OTLP protobuf wire format (`application/x-protobuf`) read into the same
//! [`model`](crate::model) as OTLP/JSON, by hand: only the fields the model has, every
//! other field skipped by its wire type. Every length is checked against what is left of
//! its message, nesting is bounded, and any input gives a model or a
//! [`ModelError::Protobuf`], never a panic.

use crate::model::{
    AnyValue, Cuts, DataPoint, Export, KeyValue, Limits, LogRecord, Metric, MetricKind, Model,
    ModelError, PointValue, ResourceItems, Scope, ScopeItems, SignalKind, Span, SpanEvent,
    cut_string, hex_of,
};

/// How deep messages nest at most (an export's own structure is 6 deep; `AnyValue`s add to
/// it up to [`Limits::max_depth`]).
const MAX_NESTING: usize = 64;

/// Reads an OTLP protobuf body of `kind`
/// (`ExportLogsServiceRequest`, `ExportTraceServiceRequest`, `ExportMetricsServiceRequest`).
pub fn decode(kind: SignalKind, body: &[u8], limits: &Limits) -> Result<Model, ModelError> {
    let mut r = Reader {
        limits,
        cuts: Cuts::default(),
        items: 0,
        base: body.as_ptr() as usize,
    };
    let top = Msg::new(body);
    Ok(match kind {
        SignalKind::Logs => {
            let resources = r.resources(top, |r, m| r.log_record(m))?;
            Model::Logs(Export {
                resources,
                cuts: r.cuts,
            })
        }
        SignalKind::Traces => {
            let resources = r.resources(top, |r, m| r.span(m))?;
            Model::Traces(Export {
                resources,
                cuts: r.cuts,
            })
        }
        SignalKind::Metrics => {
            let resources = r.resources(top, |r, m| r.metric(m))?;
            Model::Metrics(Export {
                resources,
                cuts: r.cuts,
            })
        }
    })
}

/// One field's value on the wire.
#[derive(Debug, Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    /// Skipped: no field the model reads is a fixed32.
    Fixed32,
    Bytes(&'a [u8]),
}

/// A message's bytes, read field by field.
#[derive(Debug, Clone, Copy)]
struct Msg<'a> {
    bytes: &'a [u8],
    depth: usize,
}

impl<'a> Msg<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Msg { bytes, depth: 0 }
    }

    fn nested(&self, bytes: &'a [u8]) -> Self {
        Msg {
            bytes,
            depth: self.depth + 1,
        }
    }
}

struct Reader<'l> {
    limits: &'l Limits,
    cuts: Cuts,
    items: usize,
    /// The body's address, to report offsets.
    base: usize,
}

type ItemReader<T> = fn(&mut Reader<'_>, Msg<'_>) -> Result<T, ModelError>;

impl Reader<'_> {
    fn error(&self, at: &[u8], what: &'static str) -> ModelError {
        ModelError::Protobuf {
            offset: (at.as_ptr() as usize).saturating_sub(self.base),
            what,
        }
    }

    /// Calls `each` with every field (number, value) of `msg`.
    fn fields<'a>(
        &self,
        msg: Msg<'a>,
        mut each: impl FnMut(u32, Wire<'a>) -> Result<(), ModelError>,
    ) -> Result<(), ModelError> {
        if msg.depth > MAX_NESTING {
            return Err(self.error(msg.bytes, "messages nested too deep"));
        }
        let mut rest = msg.bytes;
        while !rest.is_empty() {
            let at = rest;
            let key = varint(&mut rest).ok_or_else(|| self.error(at, "truncated field key"))?;
            let number =
                u32::try_from(key >> 3).map_err(|_| self.error(at, "field number too large"))?;
            if number == 0 {
                return Err(self.error(at, "field number 0"));
            }
            let value = match key & 7 {
                0 => Wire::Varint(
                    varint(&mut rest).ok_or_else(|| self.error(at, "truncated varint"))?,
                ),
                1 => {
                    let (v, tail) = rest
                        .split_first_chunk::<8>()
                        .ok_or_else(|| self.error(at, "truncated fixed64"))?;
                    rest = tail;
                    Wire::Fixed64(u64::from_le_bytes(*v))
                }
                2 => {
                    let len =
                        varint(&mut rest).ok_or_else(|| self.error(at, "truncated length"))?;
                    let len = usize::try_from(len)
                        .ok()
                        .filter(|l| *l <= rest.len())
                        .ok_or_else(|| self.error(at, "length beyond the message"))?;
                    let (v, tail) = rest.split_at(len);
                    rest = tail;
                    Wire::Bytes(v)
                }
                5 => {
                    let (_, tail) = rest
                        .split_first_chunk::<4>()
                        .ok_or_else(|| self.error(at, "truncated fixed32"))?;
                    rest = tail;
                    Wire::Fixed32
                }
                _ => return Err(self.error(at, "unsupported wire type (groups or invalid)")),
            };
            each(number, value)?;
        }
        Ok(())
    }

    /// Counts one more record; `false` (and counted as cut) beyond `max_items`.
    fn take_item(&mut self) -> bool {
        self.limits.take_item(&mut self.items, &mut self.cuts)
    }

    /// `resource_*` (1) → resource (1), `scope_*` (2) → scope (1), items (2).
    fn resources<T>(
        &mut self,
        top: Msg<'_>,
        read: ItemReader<T>,
    ) -> Result<Vec<ResourceItems<T>>, ModelError> {
        let mut resources = Vec::new();
        for r in self.messages(top, 1)? {
            let mut resource = Scope::default();
            let mut scopes = Vec::new();
            for (n, v) in self.collect(r)? {
                match (n, v) {
                    (1, Wire::Bytes(b)) => resource = self.scope(r.nested(b), false)?,
                    (2, Wire::Bytes(b)) => {
                        let s = r.nested(b);
                        let mut scope = Scope::default();
                        let mut items = Vec::new();
                        for (n, v) in self.collect(s)? {
                            match (n, v) {
                                (1, Wire::Bytes(b)) => scope = self.scope(s.nested(b), true)?,
                                // Beyond the limit, an item is counted and skipped.
                                (2, Wire::Bytes(b)) if self.take_item() => {
                                    items.push(read(self, s.nested(b))?);
                                }
                                _ => {}
                            }
                        }
                        scopes.push(ScopeItems { scope, items });
                    }
                    _ => {}
                }
            }
            resources.push(ResourceItems { resource, scopes });
        }
        Ok(resources)
    }

    /// The fields of `msg`, in order.
    fn collect<'a>(&self, msg: Msg<'a>) -> Result<Vec<(u32, Wire<'a>)>, ModelError> {
        let mut out = Vec::new();
        self.fields(msg, |n, v| {
            out.push((n, v));
            Ok(())
        })?;
        Ok(out)
    }

    /// The embedded messages of field `number`.
    fn messages<'a>(&self, msg: Msg<'a>, number: u32) -> Result<Vec<Msg<'a>>, ModelError> {
        let mut out = Vec::new();
        self.fields(msg, |n, v| {
            if n == number
                && let Wire::Bytes(b) = v
            {
                out.push(msg.nested(b));
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// A resource (attributes 1) or an instrumentation scope (name 1, version 2,
    /// attributes 3).
    fn scope(&mut self, msg: Msg<'_>, is_scope: bool) -> Result<Scope, ModelError> {
        let mut scope = Scope::default();
        for (n, v) in self.collect(msg)? {
            match (n, v, is_scope) {
                (1, Wire::Bytes(b), true) => scope.name = self.string(b),
                (2, Wire::Bytes(b), true) => scope.version = self.string(b),
                (3, Wire::Bytes(b), true) | (1, Wire::Bytes(b), false) => {
                    self.attribute(msg.nested(b), &mut scope.attributes, 0)?
                }
                _ => {}
            }
        }
        Ok(scope)
    }

    /// Adds one KeyValue (key 1, value 2) to `list`, within the limit.
    fn attribute(
        &mut self,
        msg: Msg<'_>,
        list: &mut Vec<KeyValue>,
        depth: usize,
    ) -> Result<(), ModelError> {
        if list.len() >= self.limits.max_attributes {
            self.cuts.attributes += 1;
            // Still checked, so that a broken body is an error wherever it breaks.
            self.fields(msg, |_, _| Ok(()))?;
            return Ok(());
        }
        let mut key = String::new();
        let mut value = AnyValue::Empty;
        for (n, v) in self.collect(msg)? {
            match (n, v) {
                (1, Wire::Bytes(b)) => key = self.string(b),
                (2, Wire::Bytes(b)) => value = self.any_value(msg.nested(b), depth)?,
                _ => {}
            }
        }
        list.push(KeyValue { key, value });
        Ok(())
    }

    fn any_value(&mut self, msg: Msg<'_>, depth: usize) -> Result<AnyValue, ModelError> {
        let mut value = AnyValue::Empty;
        for (n, v) in self.collect(msg)? {
            value = match (n, v) {
                (1, Wire::Bytes(b)) => AnyValue::Str(self.string(b)),
                (2, Wire::Varint(i)) => AnyValue::Bool(i != 0),
                (3, Wire::Varint(i)) => AnyValue::Int(i as i64),
                (4, Wire::Fixed64(d)) => AnyValue::Double(f64::from_bits(d)),
                (7, Wire::Bytes(b)) => {
                    let keep = b.len().min(self.limits.max_string);
                    if keep < b.len() {
                        self.cuts.strings += 1;
                    }
                    AnyValue::Bytes(b[..keep].to_vec())
                }
                (5 | 6, Wire::Bytes(b)) if depth >= self.limits.max_depth => {
                    self.cuts.depth += 1;
                    // Checked all the same.
                    self.fields(msg.nested(b), |_, _| Ok(()))?;
                    AnyValue::Empty
                }
                (5, Wire::Bytes(b)) => {
                    let mut items = Vec::new();
                    for item in self.messages(msg.nested(b), 1)? {
                        if items.len() >= self.limits.max_array {
                            self.cuts.array_items += 1;
                            continue;
                        }
                        items.push(self.any_value(item, depth + 1)?);
                    }
                    AnyValue::Array(items)
                }
                (6, Wire::Bytes(b)) => {
                    let mut kvs = Vec::new();
                    for kv in self.messages(msg.nested(b), 1)? {
                        self.attribute(kv, &mut kvs, depth + 1)?;
                    }
                    AnyValue::KvList(kvs)
                }
                _ => continue,
            };
        }
        Ok(value)
    }

    fn log_record(&mut self, msg: Msg<'_>) -> Result<LogRecord, ModelError> {
        let mut rec = LogRecord::default();
        for (n, v) in self.collect(msg)? {
            match (n, v) {
                (1, Wire::Fixed64(t)) => rec.time_unix_nano = t,
                (11, Wire::Fixed64(t)) => rec.observed_time_unix_nano = t,
                (2, Wire::Varint(s)) => rec.severity_number = s as i32,
                (3, Wire::Bytes(b)) => rec.severity_text = self.string(b),
                (5, Wire::Bytes(b)) => rec.body = Some(self.any_value(msg.nested(b), 0)?),
                (6, Wire::Bytes(b)) => self.attribute(msg.nested(b), &mut rec.attributes, 0)?,
                (9, Wire::Bytes(b)) => rec.trace_id = id(b),
                (10, Wire::Bytes(b)) => rec.span_id = id(b),
                (12, Wire::Bytes(b)) => rec.event_name = self.string(b),
                _ => {}
            }
        }
        Ok(rec)
    }

    fn span(&mut self, msg: Msg<'_>) -> Result<Span, ModelError> {
        let mut span = Span::default();
        for (n, v) in self.collect(msg)? {
            match (n, v) {
                (1, Wire::Bytes(b)) => span.trace_id = id(b),
                (2, Wire::Bytes(b)) => span.span_id = id(b),
                (4, Wire::Bytes(b)) => span.parent_span_id = id(b),
                (5, Wire::Bytes(b)) => span.name = self.string(b),
                (6, Wire::Varint(k)) => span.kind = k as i32,
                (7, Wire::Fixed64(t)) => span.start_time_unix_nano = t,
                (8, Wire::Fixed64(t)) => span.end_time_unix_nano = t,
                (9, Wire::Bytes(b)) => self.attribute(msg.nested(b), &mut span.attributes, 0)?,
                (11, Wire::Bytes(b)) => {
                    let e = msg.nested(b);
                    let mut event = SpanEvent::default();
                    for (n, v) in self.collect(e)? {
                        match (n, v) {
                            (1, Wire::Fixed64(t)) => event.time_unix_nano = t,
                            (2, Wire::Bytes(b)) => event.name = self.string(b),
                            (3, Wire::Bytes(b)) => {
                                self.attribute(e.nested(b), &mut event.attributes, 0)?
                            }
                            _ => {}
                        }
                    }
                    if self.take_item() {
                        span.events.push(event);
                    }
                }
                (15, Wire::Bytes(b)) => {
                    for (n, v) in self.collect(msg.nested(b))? {
                        match (n, v) {
                            (2, Wire::Bytes(m)) => span.status_message = self.string(m),
                            (3, Wire::Varint(c)) => span.status_code = c as i32,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(span)
    }

    fn metric(&mut self, msg: Msg<'_>) -> Result<Metric, ModelError> {
        let mut metric = Metric {
            name: String::new(),
            description: String::new(),
            unit: String::new(),
            kind: MetricKind::Unknown,
            temporality: 0,
            monotonic: false,
            points: Vec::new(),
        };
        for (n, v) in self.collect(msg)? {
            let kind = match n {
                5 => MetricKind::Gauge,
                7 => MetricKind::Sum,
                9 => MetricKind::Histogram,
                10 => MetricKind::ExponentialHistogram,
                11 => MetricKind::Summary,
                _ => MetricKind::Unknown,
            };
            match (n, v) {
                (1, Wire::Bytes(b)) => metric.name = self.string(b),
                (2, Wire::Bytes(b)) => metric.description = self.string(b),
                (3, Wire::Bytes(b)) => metric.unit = self.string(b),
                (5 | 7 | 9 | 10 | 11, Wire::Bytes(b)) => {
                    metric.kind = kind;
                    let data = msg.nested(b);
                    for (n, v) in self.collect(data)? {
                        match (n, v) {
                            (1, Wire::Bytes(p)) if self.take_item() => {
                                let point = self.point(data.nested(p), kind)?;
                                metric.points.push(point);
                            }
                            (2, Wire::Varint(t))
                                if kind != MetricKind::Gauge && kind != MetricKind::Summary =>
                            {
                                metric.temporality = t as i32
                            }
                            (3, Wire::Varint(m)) if kind == MetricKind::Sum => {
                                metric.monotonic = m != 0
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(metric)
    }

    fn point(&mut self, msg: Msg<'_>, kind: MetricKind) -> Result<DataPoint, ModelError> {
        // Where each kind of point keeps its attributes.
        let attributes_field = match kind {
            MetricKind::ExponentialHistogram => 1,
            MetricKind::Histogram => 9,
            _ => 7,
        };
        let (min_field, max_field) = match kind {
            MetricKind::Histogram => (11, 12),
            MetricKind::ExponentialHistogram => (12, 13),
            _ => (0, 0),
        };
        let mut point = DataPoint {
            attributes: Vec::new(),
            start_time_unix_nano: 0,
            time_unix_nano: 0,
            value: match kind {
                MetricKind::Gauge | MetricKind::Sum | MetricKind::Unknown => PointValue::Empty,
                _ => PointValue::Distribution {
                    count: 0,
                    sum: None,
                    min: None,
                    max: None,
                },
            },
        };
        for (n, v) in self.collect(msg)? {
            match (n, v) {
                (n, Wire::Bytes(b)) if n == attributes_field => {
                    self.attribute(msg.nested(b), &mut point.attributes, 0)?
                }
                (2, Wire::Fixed64(t)) => point.start_time_unix_nano = t,
                (3, Wire::Fixed64(t)) => point.time_unix_nano = t,
                _ => {}
            }
            let is_number = matches!(
                kind,
                MetricKind::Gauge | MetricKind::Sum | MetricKind::Unknown
            );
            match (n, v) {
                (4, Wire::Fixed64(d)) if is_number => {
                    point.value = PointValue::Double(f64::from_bits(d))
                }
                (6, Wire::Fixed64(i)) if is_number => point.value = PointValue::Int(i as i64),
                _ => {}
            }
            if let PointValue::Distribution {
                count,
                sum,
                min,
                max,
            } = &mut point.value
                && let Wire::Fixed64(x) = v
            {
                match n {
                    4 => *count = x,
                    5 => *sum = Some(f64::from_bits(x)),
                    f if f == min_field => *min = Some(f64::from_bits(x)),
                    f if f == max_field => *max = Some(f64::from_bits(x)),
                    _ => {}
                }
            }
        }
        Ok(point)
    }

    /// A string field, lossily decoded and cut to `max_string` bytes.
    fn string(&mut self, bytes: &[u8]) -> String {
        let text = String::from_utf8_lossy(bytes);
        cut_string(&text, self.limits.max_string, &mut self.cuts)
    }
}

/// A trace or span id as lowercase hex (`None` when empty or all zeros).
fn id(bytes: &[u8]) -> Option<String> {
    (!bytes.is_empty() && bytes.len() <= 32 && bytes.iter().any(|b| *b != 0)).then(|| hex_of(bytes))
}

/// Reads a varint (at most 10 bytes) off the front of `bytes` (left as it was when there
/// is none).
pub(crate) fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value: u64 = 0;
    for (i, b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_read_and_stop() {
        let mut b: &[u8] = &[0x96, 0x01, 0x05];
        assert_eq!(varint(&mut b), Some(150));
        assert_eq!(b, &[0x05]);
        let mut b: &[u8] = &[0x80, 0x80];
        assert_eq!(varint(&mut b), None);
        let mut b: &[u8] = &[0xff; 11];
        assert_eq!(varint(&mut b), None);
    }

    #[test]
    fn a_length_beyond_the_body_is_an_error() {
        // resource_logs (1, bytes) of length 100 with 2 bytes.
        let body = [0x0a, 100, 1, 2];
        let err = decode(SignalKind::Logs, &body, &Limits::default()).unwrap_err();
        assert!(
            matches!(err, ModelError::Protobuf { offset: 0, .. }),
            "{err}"
        );
    }
}
