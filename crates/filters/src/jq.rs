//! jq expressions (`when`'s `expr`, `map`'s `expr` and `when` guard), compiled at load with
//! jaq and run on the signal envelope as JSON.
//!
//! The standard library of jq is available (jaq's core, std and JSON definitions) except
//! `env` (environment variables hold secrets: an expression must not copy them into
//! signals) and the `input`/`inputs` filters. `halt` does not stop patchbay: it is a runtime
//! error like any other.
//!
//! **Limits.** One evaluation (one signal) may take at most [`MAX_STEPS`] steps (a step is
//! a call of a jq function, a value `range` produces, an iteration of `reduce`/`foreach`),
//! nest its calls at most [`MAX_STACK`] bytes of stack deep, and allocate at most
//! [`MAX_MEMORY`] bytes while it runs (where the process counts allocations with
//! [`MeteredAlloc`], as the `patchbay` binary does). Past a limit the evaluation stops
//! and the signal gets a runtime error (counted as the filter's error for that signal),
//! so that `def f: f; f`, `last(range(1e18))`, `def f: f + 1; f` or
//! `[range(1e18)] | length` neither stall the graph, nor abort the process, nor eat its
//! memory.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;

use jaq_core::data::{DataT, HasLut};
use jaq_core::load::{Arena, File, Loader};
use jaq_core::native::v;
use jaq_core::{Ctx, Native, ValX, Vars};
use jaq_json::{Num, Val};
use patchbay_signal::Signal;
use serde::Deserialize;
use serde::de::{Deserializer, Error as _};
use serde_json::{Number, Value};

/// The most steps one evaluation may take (about a few hundred milliseconds of work).
pub const MAX_STEPS: u64 = 1_000_000;

/// The most stack one evaluation may use, in bytes, counted from where it starts: far below
/// the 2 MiB of a runtime thread, so that a deep recursion stops with an error instead of
/// overflowing the stack (which would abort the process).
pub const MAX_STACK: usize = 256 * 1024;

/// The most memory one evaluation may allocate while it runs, in bytes (64 MiB).
pub const MAX_MEMORY: usize = 64 << 20;

/// jaq's data: the lookup table of the filter, behind a handle whose every clone is one
/// step. jaq clones it on each function call, each bound variable and each iteration, so
/// the handle sees every loop, recursion and generator of an expression.
struct Metered;

impl DataT for Metered {
    type V<'a> = Val;
    type Data<'a> = MeteredLut<'a>;
}

struct MeteredLut<'a>(&'a jaq_core::Lut<Metered>);

impl Clone for MeteredLut<'_> {
    fn clone(&self) -> Self {
        step();
        MeteredLut(self.0)
    }
}

impl<'a> HasLut<'a, Metered> for MeteredLut<'a> {
    fn lut(&self) -> &'a jaq_core::Lut<Metered> {
        self.0
    }
}

type Data = Metered;

/// Why an evaluation was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exceeded {
    Steps,
    Stack,
    Memory,
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exceeded::Steps => write!(f, "the jq expression took more than {MAX_STEPS} steps"),
            Exceeded::Stack => write!(
                f,
                "the jq expression recursed too deep (more than {} KiB of stack)",
                MAX_STACK / 1024
            ),
            Exceeded::Memory => write!(
                f,
                "the jq expression allocated more than {} MiB",
                MAX_MEMORY >> 20
            ),
        }
    }
}

/// The meter of the evaluation running on this thread, if any.
#[derive(Debug, Clone, Copy)]
struct Meter {
    steps: u64,
    stack_base: usize,
}

thread_local! {
    static METER: Cell<Option<Meter>> = const { Cell::new(None) };
    /// Bytes allocated (minus freed) on this thread while an evaluation runs.
    static ALLOCATED: Cell<isize> = const { Cell::new(0) };
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

/// The address of a local: where the stack is now.
#[inline(always)]
fn stack_here() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// One step of the running evaluation: stops it (unwinding to [`JqExpr::run`], without the
/// panic hook) when a limit is passed.
fn step() {
    let Some(mut meter) = METER.with(Cell::get) else {
        return;
    };
    meter.steps += 1;
    let exceeded = if meter.steps > MAX_STEPS {
        Some(Exceeded::Steps)
    } else if meter.stack_base.abs_diff(stack_here()) > MAX_STACK {
        Some(Exceeded::Stack)
    } else if ALLOCATED.with(Cell::get) > MAX_MEMORY as isize {
        Some(Exceeded::Memory)
    } else {
        None
    };
    METER.with(|m| m.set(Some(meter)));
    if let Some(exceeded) = exceeded {
        // Stop metering first: unwinding clones and drops nothing metered, but be safe.
        METER.with(|m| m.set(None));
        resume_unwind(Box::new(exceeded));
    }
}

/// Meters the evaluation `run` on this thread; restores the previous state after.
fn metered<T>(run: impl FnOnce() -> T) -> std::thread::Result<T> {
    let outer = METER.with(|m| {
        m.replace(Some(Meter {
            steps: 0,
            stack_base: stack_here(),
        }))
    });
    let before = ALLOCATED.with(|a| a.replace(0));
    COUNTING.with(|c| c.set(true));
    let result = catch_unwind(AssertUnwindSafe(run));
    COUNTING.with(|c| c.set(false));
    ALLOCATED.with(|a| a.set(before));
    METER.with(|m| m.set(outer));
    result
}

/// An allocator (the system's by default, `MeteredAlloc(System)`), counting what a jq
/// evaluation allocates on its thread so that [`MAX_MEMORY`] holds. A program that runs
/// jq expressions from untrusted configs installs it with `#[global_allocator]`, around
/// the allocator it wants; without it, an evaluation is bounded by its steps and stack
/// only.
#[derive(Debug, Default, Clone, Copy)]
pub struct MeteredAlloc<A = System>(pub A);

fn count_allocation(delta: isize) {
    // `try_with`: the thread-locals may be gone while a thread ends.
    let _ = COUNTING.try_with(|counting| {
        if counting.get() {
            let _ = ALLOCATED.try_with(|a| a.set(a.get().saturating_add(delta)));
        }
    });
}

// SAFETY: every call is forwarded to the inner allocator unchanged; counting touches only
// const-initialized thread-locals (no allocation, no unwinding).
#[allow(unsafe_code)]
unsafe impl<A: GlobalAlloc> GlobalAlloc for MeteredAlloc<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation(layout.size() as isize);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_allocation(layout.size() as isize);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count_allocation(-(layout.size() as isize));
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_allocation(new_size as isize - layout.size() as isize);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }
}

/// `range($from; $to; $by)` as jaq's, but each value produced is a step: a generator
/// such as `range(1e18)` calls no function between its values.
fn metered_range(mut cv: jaq_core::Cv<'_, Data>) -> jaq_core::ValXs<'_, Val> {
    let by = cv.0.pop_var();
    let to = cv.0.pop_var();
    let from = cv.0.pop_var();
    let ascending = by > Val::from(0isize);
    let descending = by < Val::from(0isize);
    let mut next: Option<ValX<Val>> = Some(Ok(from));
    Box::new(std::iter::from_fn(move || {
        let x = match next.take()? {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        let go = if ascending {
            x < to
        } else if descending {
            x > to
        } else {
            x != to
        };
        if !go {
            return None;
        }
        step();
        next = Some((x.clone() + by.clone()).map_err(jaq_core::Exn::from));
        Some(Ok(x))
    }))
}

/// Native jq filters left out: see the module documentation.
const EXCLUDED: [&str; 3] = ["env", "input", "inputs"];

/// Values nested deeper than this are refused when converting to and from JSON, so that a
/// pathological output (`reduce range(1e6) as $i (0; [.])`) cannot overflow the stack.
const MAX_DEPTH: usize = 128;

/// Why a jq expression does not compile: every problem found, each with its position in
/// the expression where it has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad jq expression: {}", .problems.join("; "))]
pub struct CompileError {
    /// One message per problem, e.g. ``undefined filter `f/1` at position 3``.
    pub problems: Vec<String>,
}

/// Why running a jq expression on a signal stopped (jq stops at an uncaught error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// An error the expression raised (`error("…")`) or ran into (a type error).
    #[error("{0}")]
    Raised(String),
    /// `halt` or `halt_error` was called: an error here, never an exit.
    #[error("halt({0}) called")]
    Halt(String),
    /// jaq reported an exception that is neither an error nor a halt.
    #[error("internal jq error")]
    Internal,
    /// jaq panicked (caught, so that patchbay goes on).
    #[error("the jq interpreter failed")]
    Panicked,
    /// An output nested too deep to convert to JSON (see `MAX_DEPTH`).
    #[error("output nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// The evaluation passed one of its limits (steps, stack, memory) and was stopped.
    #[error("{0}")]
    Limit(String),
}

/// A compiled jq expression.
#[derive(Clone)]
pub struct JqExpr {
    code: String,
    filter: Arc<jaq_core::Filter<Data>>,
}

impl fmt::Debug for JqExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JqExpr({:?})", self.code)
    }
}

patchbay_graph::described_as!(JqExpr, {"type": "string"});

impl<'de> Deserialize<'de> for JqExpr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = String::deserialize(deserializer)?;
        JqExpr::compile(&code).map_err(D::Error::custom)
    }
}

impl JqExpr {
    /// Compiles `code`; the error says what is wrong and where (a 1-based character
    /// position in the expression).
    pub fn compile(code: &str) -> Result<JqExpr, CompileError> {
        let defs = jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs());
        let range = ("range", v(3), Native::<Data>::new(metered_range));
        let funs = jaq_core::funs::<Data>()
            .filter(|(name, _, _)| *name != "range")
            .chain([range])
            .chain(jaq_std::funs::<Data>())
            .chain(jaq_json::funs::<Data>())
            .filter(|(name, _, _)| !EXCLUDED.contains(name));
        let arena = Arena::default();
        let modules = Loader::new(defs)
            .load(&arena, File { code, path: () })
            .map_err(|errors| describe_load_errors(code, errors))?;
        let filter = jaq_core::Compiler::default()
            .with_funs(funs)
            .compile(modules)
            .map_err(describe_compile_errors)?;
        Ok(JqExpr {
            code: code.to_owned(),
            filter: Arc::new(filter),
        })
    }

    /// The expression as written.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// Whether the first output on `signal` is neither `false` nor `null`. No output, or a
    /// runtime error before the first output, counts as false.
    pub fn is_truthy(&self, signal: &Signal) -> bool {
        let mut truthy = false;
        self.run(signal, |output| {
            truthy = matches!(output, Ok(v) if !matches!(v, Val::Null | Val::Bool(false)));
            false
        });
        truthy
    }

    /// The outputs on `signal` as JSON, at most `max` of them; a runtime error ends the
    /// list (jq stops at an uncaught error).
    pub fn outputs(&self, signal: &Signal, max: usize) -> Vec<Result<Value, RunError>> {
        let mut outputs = Vec::new();
        self.run(signal, |output| {
            let converted = output.and_then(|v| val_to_json(&v, 0));
            let stop = converted.is_err();
            outputs.push(converted);
            !stop && outputs.len() < max
        });
        outputs
    }

    /// Runs the expression on the envelope of `signal`, handing each output to `each`
    /// until it returns false, within the limits (see the module documentation). A limit
    /// passed, or a panic inside jaq, is a runtime error.
    fn run(&self, signal: &Signal, mut each: impl FnMut(Result<Val, RunError>) -> bool) {
        let input = signal_to_val(signal);
        let filter = &self.filter;
        let mut more = true;
        let result = metered(|| {
            let ctx = Ctx::<Data>::new(MeteredLut(&filter.lut), Vars::new([]));
            for output in filter.id.run((ctx, input)) {
                more = each(output.map_err(describe_exception));
                if !more {
                    break;
                }
            }
        });
        if let Err(panic) = result
            && more
        {
            each(Err(match panic.downcast::<Exceeded>() {
                Ok(exceeded) => RunError::Limit(exceeded.to_string()),
                Err(_) => RunError::Panicked,
            }));
        }
    }
}

fn describe_exception(exn: jaq_core::Exn<'_, Val>) -> RunError {
    match exn.get_err() {
        Ok(error) => RunError::Raised(error.to_string()),
        Err(exn) => match exn.get_halt() {
            Ok(code) => RunError::Halt(code.to_string()),
            Err(_) => RunError::Internal,
        },
    }
}

/// The 1-based character position of `part` in `code`, when `part` is a slice of it.
fn position(code: &str, part: &str) -> Option<usize> {
    let offset = (part.as_ptr() as usize).checked_sub(code.as_ptr() as usize)?;
    let before = code.get(..offset)?;
    Some(before.chars().count() + 1)
}

fn at(code: &str, part: &str) -> String {
    match position(code, part) {
        Some(pos) if part.is_empty() => format!(" at the end (position {pos})"),
        Some(pos) => format!(" at position {pos}"),
        None => String::new(),
    }
}

fn describe_load_errors(code: &str, errors: jaq_core::load::Errors<&str, ()>) -> CompileError {
    use jaq_core::load::Error;
    use jaq_core::load::lex::Expect as LexExpect;
    let mut messages = Vec::new();
    for (_file, error) in errors {
        match error {
            Error::Io(items) => {
                for (path, message) in items {
                    messages.push(format!("cannot load module `{path}`: {message}"));
                }
            }
            Error::Lex(items) => {
                for (expect, part) in items {
                    // `as_str` knows the delimiters jaq uses and panics on others.
                    let what = match expect {
                        LexExpect::Delim(d) if !["(", "[", "{", "\""].contains(&d) => {
                            format!("a closing delimiter for `{d}`")
                        }
                        other => other.as_str().to_owned(),
                    };
                    messages.push(format!("expected {what}{}", at(code, part)));
                }
            }
            Error::Parse(items) => {
                for (expect, part) in items {
                    let found = if part.is_empty() {
                        "the end of the expression".to_owned()
                    } else {
                        format!("`{}`{}", first_token(part), at(code, part))
                    };
                    messages.push(format!("expected {}, found {found}", expect.as_str()));
                }
            }
        }
    }
    CompileError { problems: messages }
}

/// A short excerpt of the text where an error was found.
fn first_token(text: &str) -> String {
    let end = text
        .char_indices()
        .nth(20)
        .map(|(i, _)| i)
        .unwrap_or(text.len());
    text.get(..end).unwrap_or(text).to_owned()
}

fn describe_compile_errors(errors: jaq_core::compile::Errors<&str, ()>) -> CompileError {
    use jaq_core::compile::Undefined;
    let mut messages = Vec::new();
    for (file, items) in errors {
        for (name, undefined) in items {
            let what = match undefined {
                Undefined::Filter(arity) => format!("filter `{name}/{arity}`"),
                other => format!("{} `{name}`", other.as_str()),
            };
            messages.push(format!("undefined {what}{}", at(file.code, name)));
        }
    }
    CompileError { problems: messages }
}

fn str_val(s: &str) -> Val {
    Val::from(s.to_owned())
}

/// The envelope as a jq value, built field by field (no intermediate JSON text).
fn signal_to_val(signal: &Signal) -> Val {
    let mut map = jaq_json::Map::default();
    map.insert(str_val("id"), str_val(&signal.id));
    map.insert(str_val("type"), str_val(&signal.kind));
    map.insert(
        str_val("timestamp"),
        Val::Num(Num::from_integral(signal.timestamp)),
    );
    map.insert(str_val("source"), str_val(&signal.source));
    if let Some(c) = &signal.correlation_id {
        map.insert(str_val("correlationId"), str_val(c));
    }
    if let Some(m) = &signal.metadata {
        map.insert(str_val("metadata"), object_to_val(m, 1));
    }
    map.insert(str_val("payload"), object_to_val(&signal.payload, 1));
    Val::obj(map)
}

fn object_to_val(object: &patchbay_signal::Object, depth: usize) -> Val {
    let mut map = jaq_json::Map::default();
    for (k, v) in object {
        map.insert(str_val(k), json_to_val(v, depth + 1));
    }
    Val::obj(map)
}

fn json_to_val(value: &Value, depth: usize) -> Val {
    if depth > MAX_DEPTH {
        return Val::Null;
    }
    match value {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Val::Num(Num::from_integral(i)),
            (None, Some(u)) => Val::Num(Num::from_integral(u)),
            _ => Val::from(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => str_val(s),
        Value::Array(items) => items.iter().map(|v| json_to_val(v, depth + 1)).collect(),
        Value::Object(map) => object_to_val(map, depth),
    }
}

/// A jq value as JSON: NaN and infinities become `null` (as jq prints them), byte strings
/// are read as UTF-8, object keys that are not strings are written as their JSON text.
fn val_to_json(value: &Val, depth: usize) -> Result<Value, RunError> {
    if depth > MAX_DEPTH {
        return Err(RunError::TooDeep);
    }
    Ok(match value {
        Val::Null => Value::Null,
        Val::Bool(b) => Value::Bool(*b),
        Val::Num(n) => num_to_json(n),
        Val::TStr(b) | Val::BStr(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        Val::Arr(items) => Value::Array(
            items
                .iter()
                .map(|v| val_to_json(v, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Val::Obj(map) => {
            let mut object = patchbay_signal::Object::new();
            for (k, v) in map.iter() {
                let key = match k {
                    Val::TStr(b) | Val::BStr(b) => String::from_utf8_lossy(b).into_owned(),
                    other => other.to_string(),
                };
                object.insert(key, val_to_json(v, depth + 1)?);
            }
            Value::Object(object)
        }
    })
}

fn num_to_json(n: &Num) -> Value {
    match n {
        Num::Int(i) => Value::from(*i as i64),
        Num::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        other => {
            serde_json::from_str::<Number>(&other.to_string()).map_or(Value::Null, Value::Number)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_signal::object;
    use serde_json::json;

    fn sig() -> Signal {
        Signal::new(
            "midi.note_on",
            "midi:pads",
            object! {"note" => 36, "velocity" => 100, "tags" => json!(["a", "b"])},
        )
        .at(1000)
        .correlated("c1")
    }

    fn outputs(code: &str) -> Vec<Result<Value, RunError>> {
        JqExpr::compile(code).unwrap().outputs(&sig(), 100)
    }

    #[test]
    fn truthiness_is_the_first_output() {
        let t = |code: &str| JqExpr::compile(code).unwrap().is_truthy(&sig());
        assert!(t(r#".type == "midi.note_on" and .payload.velocity > 0"#));
        assert!(!t(".payload.velocity > 100"));
        assert!(!t("null"));
        assert!(!t("false"));
        assert!(t("0"), "0 is truthy in jq");
        assert!(t(r#""""#));
        assert!(!t("empty"), "no output does not pass");
        assert!(!t("false, true"), "only the first output counts");
        assert!(!t(r#"error("x")"#), "a runtime error does not pass");
        assert!(!t(".payload.note + \"x\""), "a type error does not pass");
        assert!(!t("halt"), "halt is an error, not an exit");
        assert!(t(
            ".correlationId == \"c1\" and .timestamp == 1000 and .source == \"midi:pads\""
        ));
    }

    #[test]
    fn outputs_are_json() {
        assert_eq!(
            outputs(".payload.tags[]"),
            vec![Ok(json!("a")), Ok(json!("b"))]
        );
        assert_eq!(
            outputs("1.5, 2, nan, infinite"),
            vec![
                Ok(json!(1.5)),
                Ok(json!(2)),
                Ok(Value::Null),
                Ok(Value::Null)
            ]
        );
        assert_eq!(outputs("{(1|tostring): 1}"), vec![Ok(json!({"1": 1}))]);
        let out = outputs(r#"1, error("boom"), 2"#);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], Ok(json!(1)));
        assert!(out[1].as_ref().unwrap_err().to_string().contains("boom"));
        let deep = outputs("reduce range(200) as $i (0; [.])");
        assert_eq!(deep[0], Err(RunError::TooDeep));
        assert_eq!(
            deep[0].as_ref().unwrap_err().to_string(),
            "output nested deeper than 128 levels"
        );
        let many = JqExpr::compile("range(10)").unwrap().outputs(&sig(), 3);
        assert_eq!(many.len(), 3);
        assert_eq!(outputs("100000000000000000000"), vec![Ok(json!(1e20))]);
    }

    #[test]
    fn compile_errors_say_where() {
        let message = |code: &str| JqExpr::compile(code).unwrap_err().to_string();
        let err = message(".a | ");
        assert!(err.starts_with("bad jq expression: "), "{err}");
        assert!(err.contains("end"), "{err}");
        let err = message("nosuchfilter(1)");
        assert_eq!(
            JqExpr::compile("nosuchfilter(1)").unwrap_err().problems,
            ["undefined filter `nosuchfilter/1` at position 1"]
        );
        assert!(err.contains("undefined filter `nosuchfilter/1`"), "{err}");
        assert!(err.contains("position 1"), "{err}");
        let err = message(".a | env");
        assert!(err.contains("`env/0`"), "{err}");
        let err = message("\"abc");
        assert!(err.contains("closing quote"), "{err}");
        let err = message("(1");
        assert!(err.contains("bad jq expression"), "{err}");
        let err = message(".a | )");
        assert!(err.contains("position 6"), "{err}");
        assert!(JqExpr::compile("$x").is_err());
        assert!(JqExpr::compile("").is_err());
    }
}
