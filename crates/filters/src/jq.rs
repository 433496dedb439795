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
//!
//! Some values are refused before they are made, because making them is already the harm:
//! a value nested deeper than [`MAX_VALUE_DEPTH`] (`reduce range(1e6) as $i (0; [.])`: its
//! drop, comparison or printing would recurse past the end of the stack), a string repeat
//! larger than [`MAX_MEMORY`] (`"x" * 1e12`: one allocation that would abort the process
//! before any step could stop it), an integer product over [`MAX_INT_BITS`] bits (squaring
//! big integers takes time no step counts), `explode` of a string whose characters would
//! take more than [`MAX_MEMORY`], and `fromjson` of a text nested deeper than
//! [`MAX_VALUE_DEPTH`] (jaq's parser recurses). To see every value made, the expression
//! (and the standard library's definitions) is rewritten when it is compiled: each array
//! and object construction and each path update passes its result through a depth check,
//! and `*` goes through a checked multiplication. Names starting with `_patchbay` are
//! reserved for this.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::rc::{Rc, Weak};
use std::sync::Arc;

use jaq_core::box_iter::box_once;
use jaq_core::data::{DataT, HasLut};
use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Def, Pattern, Term};
use jaq_core::load::{Arena, File, Loader};
use jaq_core::native::v;
use jaq_core::ops::Math;
use jaq_core::path::{Part, Path};
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

/// The deepest value an evaluation may make (arrays and objects in one another): far
/// more than any signal needs (outputs deeper than 128 levels are refused anyway), far
/// less than what would overflow the stack when the value is dropped, compared or printed.
pub const MAX_VALUE_DEPTH: usize = 512;

/// The largest integer a product may give, in bits (about 315 000 decimal digits).
pub const MAX_INT_BITS: u64 = 1 << 20;

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
    Depth,
    Number,
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
            Exceeded::Depth => write!(
                f,
                "the jq expression made a value nested deeper than {MAX_VALUE_DEPTH} levels"
            ),
            Exceeded::Number => write!(
                f,
                "the jq expression made an integer larger than {MAX_INT_BITS} bits"
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
    /// Bytes allocated (minus freed) on this thread while an evaluation runs; `None` when
    /// none runs (one thread-local: the allocator reads it on every allocation).
    static ALLOCATED: Cell<Option<isize>> = const { Cell::new(None) };
}

/// The address of a local: where the stack is now.
#[inline(always)]
fn stack_here() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// Stops the running evaluation for `exceeded` (unwinding to [`JqExpr::run`], without the
/// panic hook).
fn stop(exceeded: Exceeded) -> ! {
    // Stop metering first: unwinding clones and drops nothing metered, but be safe.
    METER.with(|m| m.set(None));
    resume_unwind(Box::new(exceeded))
}

/// One step of the running evaluation: stops it when a limit is passed.
fn step() {
    let Some(mut meter) = METER.with(Cell::get) else {
        return;
    };
    meter.steps += 1;
    let exceeded = if meter.steps > MAX_STEPS {
        Some(Exceeded::Steps)
    } else if meter.stack_base.abs_diff(stack_here()) > MAX_STACK {
        Some(Exceeded::Stack)
    } else if ALLOCATED.with(Cell::get).unwrap_or(0) > MAX_MEMORY as isize {
        Some(Exceeded::Memory)
    } else {
        None
    };
    METER.with(|m| m.set(Some(meter)));
    if let Some(exceeded) = exceeded {
        stop(exceeded);
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
    let before = ALLOCATED.with(|a| a.replace(Some(0)));
    let result = catch_unwind(AssertUnwindSafe(run));
    forget_depths();
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

#[inline]
fn count_allocation(delta: isize) {
    // `try_with`: the thread-local may be gone while a thread ends.
    let _ = ALLOCATED.try_with(|a| {
        if let Some(n) = a.get() {
            a.set(Some(n.saturating_add(delta)));
        }
    });
}

// SAFETY: every call is forwarded to the inner allocator unchanged; counting touches only
// const-initialized thread-locals (no allocation, no unwinding).
#[allow(unsafe_code)]
unsafe impl<A: GlobalAlloc> GlobalAlloc for MeteredAlloc<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation(layout.size() as isize);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_allocation(layout.size() as isize);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count_allocation(-(layout.size() as isize));
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    #[inline]
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

/// A container already checked in this evaluation, held weakly: while it can be upgraded,
/// its allocation is the same and its contents unchanged (jaq changes a value in place only
/// through `Rc::make_mut`, which moves it to a new allocation while a weak reference exists),
/// so its depth still holds.
enum Checked {
    Arr(Weak<Vec<Val>>),
    Obj(Weak<jaq_json::Map>),
}

impl Checked {
    fn is_alive(&self) -> bool {
        match self {
            Checked::Arr(w) => w.strong_count() > 0,
            Checked::Obj(w) => w.strong_count() > 0,
        }
    }
}

thread_local! {
    /// The depth of each container checked in the running evaluation, by its address: a
    /// value built from checked ones is checked without walking them again.
    static DEPTHS: RefCell<HashMap<usize, (Checked, usize)>> = RefCell::new(HashMap::new());
    /// The size of [`DEPTHS`] at which its dead entries are dropped next.
    static PRUNE_AT: Cell<usize> = const { Cell::new(MIN_PRUNE_AT) };
}

/// The smallest size of [`DEPTHS`] at which its dead entries are dropped.
const MIN_PRUNE_AT: usize = 1024;

/// Forgets the depths of the evaluation that ended (and the allocations they kept).
fn forget_depths() {
    let _ = DEPTHS.try_with(|d| {
        let mut depths = d.borrow_mut();
        if depths.capacity() > 4096 {
            *depths = HashMap::new();
        } else {
            depths.clear();
        }
    });
    let _ = PRUNE_AT.try_with(|p| p.set(MIN_PRUNE_AT));
}

/// The address of a container, or `None` for a scalar.
fn container_key(value: &Val) -> Option<usize> {
    match value {
        Val::Arr(a) => Some(Rc::as_ptr(a) as *const () as usize),
        Val::Obj(o) => Some(Rc::as_ptr(o) as *const () as usize),
        _ => None,
    }
}

/// The `i`-th child of a container (an object's keys and values in turn).
fn child(value: &Val, i: usize) -> Option<&Val> {
    match value {
        Val::Arr(a) => a.get(i),
        Val::Obj(o) => o
            .get_index(i / 2)
            .map(|(k, v)| if i.is_multiple_of(2) { k } else { v }),
        _ => None,
    }
}

/// The depth of a container checked before in this evaluation.
fn known_depth(key: usize) -> Option<usize> {
    DEPTHS.with(|d| {
        d.borrow()
            .get(&key)
            .filter(|(checked, _)| checked.is_alive())
            .map(|(_, depth)| *depth)
    })
}

/// Remembers the depth of a container (its own: 1 for one without containers inside).
fn remember_depth(container: &Val, depth: usize) {
    let checked = match container {
        Val::Arr(a) => Checked::Arr(Rc::downgrade(a)),
        Val::Obj(o) => Checked::Obj(Rc::downgrade(o)),
        _ => return,
    };
    let Some(key) = container_key(container) else {
        return;
    };
    DEPTHS.with(|d| {
        let mut depths = d.borrow_mut();
        depths.insert(key, (checked, depth));
        // A weak reference keeps its allocation: forget the containers gone since the last
        // time the table doubled, so that a long loop of updates does not pile them up.
        if depths.len() >= PRUNE_AT.get() {
            depths.retain(|_, (checked, _)| checked.is_alive());
            PRUNE_AT.set((2 * depths.len()).max(MIN_PRUNE_AT));
        }
    });
}

/// Stops the evaluation when `value` is nested deeper than [`MAX_VALUE_DEPTH`]. Walks the
/// containers not checked before, without recursion; every 64 children looked at are a
/// step, so that checking large values again and again counts as work.
fn check_depth(value: &Val) {
    let Some(key) = container_key(value) else {
        return;
    };
    if known_depth(key).is_some() {
        return;
    }
    // The containers from `value` down to the one being looked at: (container, its next
    // child, the deepest of its children so far).
    let mut stack: Vec<(&Val, usize, usize)> = vec![(value, 0, 0)];
    let mut looked = 0u32;
    while let Some(top) = stack.last_mut() {
        let node = top.0;
        let Some(item) = child(node, top.1) else {
            let depth = top.2 + 1;
            stack.pop();
            remember_depth(node, depth);
            if let Some(parent) = stack.last_mut() {
                parent.2 = parent.2.max(depth);
            }
            continue;
        };
        top.1 += 1;
        looked = looked.wrapping_add(1);
        if looked.is_multiple_of(64) {
            step();
        }
        let Some(key) = container_key(item) else {
            continue;
        };
        match known_depth(key) {
            Some(depth) => {
                if stack.len() + depth > MAX_VALUE_DEPTH {
                    stop(Exceeded::Depth);
                }
                if let Some(top) = stack.last_mut() {
                    top.2 = top.2.max(depth);
                }
            }
            None => {
                if stack.len() + 1 > MAX_VALUE_DEPTH {
                    stop(Exceeded::Depth);
                }
                stack.push((item, 0, 0));
            }
        }
    }
}

/// `_patchbay_depth`: its input, once its depth is checked (see [`check_depth`]).
fn depth_guard(cv: jaq_core::Cv<'_, Data>) -> jaq_core::ValXs<'_, Val> {
    check_depth(&cv.1);
    box_once(Ok(cv.1))
}

/// The size in bits of an integer, `None` for other numbers.
fn int_bits(n: &Num) -> Option<u64> {
    match n {
        Num::Int(i) => Some(u64::from(isize::BITS - i.unsigned_abs().leading_zeros())),
        Num::BigInt(b) => Some(b.bits()),
        _ => None,
    }
}

/// How many times a string is repeated by `string * n` (0 when it is not).
fn repeat_count(n: &Num) -> u64 {
    match n {
        Num::Int(i) => u64::try_from(*i).unwrap_or(0),
        Num::BigInt(_) if Val::Num(n.clone()) > Val::from(0isize) => u64::MAX,
        _ => 0,
    }
}

/// `_patchbay_mul($l; $r)`: `$l * $r`, stopped before it makes a string larger than
/// [`MAX_MEMORY`] or an integer larger than [`MAX_INT_BITS`].
fn checked_mul(mut cv: jaq_core::Cv<'_, Data>) -> jaq_core::ValXs<'_, Val> {
    let r = cv.0.pop_var();
    let l = cv.0.pop_var();
    match (&l, &r) {
        (Val::TStr(s) | Val::BStr(s), Val::Num(n)) | (Val::Num(n), Val::TStr(s) | Val::BStr(s)) => {
            let size = (s.len() as u64).saturating_mul(repeat_count(n));
            if size > MAX_MEMORY as u64 {
                stop(Exceeded::Memory);
            }
        }
        (Val::Num(x), Val::Num(y)) => {
            if let (Some(x), Some(y)) = (int_bits(x), int_bits(y))
                && x + y > MAX_INT_BITS
            {
                stop(Exceeded::Number);
            }
        }
        _ => {}
    }
    box_once((l * r).map_err(jaq_core::Exn::from))
}

/// `_patchbay_explode_check`: its input, unless it is a string whose characters, one value
/// each, would take more than [`MAX_MEMORY`].
fn explode_check(cv: jaq_core::Cv<'_, Data>) -> jaq_core::ValXs<'_, Val> {
    if let Val::TStr(s) | Val::BStr(s) = &cv.1
        && s.len().saturating_mul(std::mem::size_of::<Val>()) > MAX_MEMORY
    {
        stop(Exceeded::Memory);
    }
    box_once(Ok(cv.1))
}

/// `_patchbay_json_check`: its input, unless it is a JSON text nested deeper than
/// [`MAX_VALUE_DEPTH`] (jaq's parser recurses once per level) or holding a number of more
/// than 10 000 digits (jaq reads it as a big integer, in time quadratic in its length).
fn json_check(cv: jaq_core::Cv<'_, Data>) -> jaq_core::ValXs<'_, Val> {
    if let Val::TStr(s) | Val::BStr(s) = &cv.1 {
        let (mut depth, mut digits, mut in_string, mut escaped) = (0usize, 0usize, false, false);
        for &b in s.iter() {
            if in_string {
                match b {
                    _ if escaped => escaped = false,
                    b'\\' => escaped = true,
                    b'"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            digits = if b.is_ascii_digit() { digits + 1 } else { 0 };
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => depth += 1,
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth > MAX_VALUE_DEPTH {
                stop(Exceeded::Depth);
            }
            if digits > 10_000 {
                stop(Exceeded::Number);
            }
        }
    }
    box_once(Ok(cv.1))
}

/// The natives whose results are checked: each is renamed (its checked definition in
/// [`GUARD_DEFS`] takes its name).
const GUARDED_NATIVES: [(&str, &str); 4] = [
    ("group_by", "_patchbay_group_by"),
    ("path_value", "_patchbay_path_value"),
    ("fromjson", "_patchbay_fromjson"),
    ("explode", "_patchbay_explode"),
];

/// Checked definitions of the renamed natives: `group_by` and `path_value` nest their
/// results one level deeper than their input, `fromjson` and `explode` may make a
/// large value from a string in one go.
const GUARD_DEFS: &str = "
def group_by(f): _patchbay_group_by(f) | _patchbay_depth;
def path_value(f): _patchbay_path_value(f) | _patchbay_depth;
def fromjson: _patchbay_json_check | _patchbay_fromjson;
def explode: _patchbay_explode_check | _patchbay_explode;
";

/// Whether a name is one the rewrite inserts (`_patchbay…`, `$__patchbay…`), which an
/// expression may not use.
fn is_reserved(name: &str) -> bool {
    let name = name.trim_start_matches('$');
    name.starts_with("_patchbay") || name.starts_with("__patchbay")
}

/// `term | _patchbay_depth`.
fn depth_checked(term: Term<&str>) -> Term<&str> {
    Term::BinOp(
        Box::new(term),
        BinaryOp::Pipe(None),
        Box::new(Term::Call("_patchbay_depth", Vec::new())),
    )
}

/// `l * r` as `l as $__patchbay_l | r as $__patchbay_r | _patchbay_mul($__patchbay_l;
/// $__patchbay_r)`: the same outputs in the same order (jq multiplies each output of `l`
/// with each of `r`).
fn checked_product<'s>(l: Term<&'s str>, r: Term<&'s str>) -> Term<&'s str> {
    let call = Term::Call(
        "_patchbay_mul",
        vec![Term::Var("$__patchbay_l"), Term::Var("$__patchbay_r")],
    );
    let inner = Term::BinOp(
        Box::new(r),
        BinaryOp::Pipe(Some(Pattern::Var("$__patchbay_r"))),
        Box::new(call),
    );
    Term::BinOp(
        Box::new(l),
        BinaryOp::Pipe(Some(Pattern::Var("$__patchbay_l"))),
        Box::new(inner),
    )
}

/// Rewrites an expression so that the values it makes are checked (see the module
/// documentation).
fn guard_term<'s>(term: Term<&'s str>) -> Term<&'s str> {
    let boxed = |t: Box<Term<&'s str>>| Box::new(guard_term(*t));
    match term {
        Term::Id | Term::Recurse | Term::Num(_) | Term::Break(_) | Term::Var(_) => term,
        Term::Str(format, parts) => Term::Str(
            format,
            parts
                .into_iter()
                .map(|part| match part {
                    StrPart::Term(t) => StrPart::Term(guard_term(t)),
                    other => other,
                })
                .collect(),
        ),
        Term::Arr(None) => Term::Arr(None),
        Term::Arr(Some(t)) => depth_checked(Term::Arr(Some(boxed(t)))),
        Term::Obj(entries) => depth_checked(Term::Obj(
            entries
                .into_iter()
                .map(|(k, v)| (guard_term(k), v.map(guard_term)))
                .collect(),
        )),
        Term::Neg(t) => Term::Neg(boxed(t)),
        Term::BinOp(l, op, r) => {
            let (l, r) = (guard_term(*l), guard_term(*r));
            match op {
                BinaryOp::Math(Math::Mul) => checked_product(l, r),
                // `l *= r` is `r as $x | l |= . * $x`.
                BinaryOp::UpdateMath(Math::Mul) => {
                    let product =
                        Term::Call("_patchbay_mul", vec![Term::Id, Term::Var("$__patchbay_r")]);
                    let update = Term::BinOp(Box::new(l), BinaryOp::Update, Box::new(product));
                    depth_checked(Term::BinOp(
                        Box::new(r),
                        BinaryOp::Pipe(Some(Pattern::Var("$__patchbay_r"))),
                        Box::new(update),
                    ))
                }
                BinaryOp::Assign
                | BinaryOp::Update
                | BinaryOp::UpdateMath(_)
                | BinaryOp::UpdateAlt => depth_checked(Term::BinOp(Box::new(l), op, Box::new(r))),
                BinaryOp::Pipe(Some(pattern)) => Term::BinOp(
                    Box::new(l),
                    BinaryOp::Pipe(Some(guard_pattern(pattern))),
                    Box::new(r),
                ),
                op => Term::BinOp(Box::new(l), op, Box::new(r)),
            }
        }
        Term::Label(name, t) => Term::Label(name, boxed(t)),
        Term::Fold(kind, xs, pattern, args) => Term::Fold(
            kind,
            boxed(xs),
            guard_pattern(pattern),
            args.into_iter().map(guard_term).collect(),
        ),
        Term::TryCatch(t, catch) => Term::TryCatch(boxed(t), catch.map(boxed)),
        Term::IfThenElse(branches, otherwise) => Term::IfThenElse(
            branches
                .into_iter()
                .map(|(c, t)| (guard_term(c), guard_term(t)))
                .collect(),
            otherwise.map(boxed),
        ),
        Term::Def(defs, t) => Term::Def(defs.into_iter().map(guard_def).collect(), boxed(t)),
        Term::Call(name, args) => Term::Call(name, args.into_iter().map(guard_term).collect()),
        Term::Path(t, path) => Term::Path(
            boxed(t),
            Path(
                path.0
                    .into_iter()
                    .map(|(part, opt)| {
                        let part = match part {
                            Part::Index(i) => Part::Index(guard_term(i)),
                            Part::Range(from, to) => {
                                Part::Range(from.map(guard_term), to.map(guard_term))
                            }
                        };
                        (part, opt)
                    })
                    .collect(),
            ),
        ),
    }
}

fn guard_pattern(pattern: Pattern<&str>) -> Pattern<&str> {
    match pattern {
        Pattern::Var(x) => Pattern::Var(x),
        Pattern::Arr(items) => Pattern::Arr(items.into_iter().map(guard_pattern).collect()),
        Pattern::Obj(entries) => Pattern::Obj(
            entries
                .into_iter()
                .map(|(k, p)| (guard_term(k), guard_pattern(p)))
                .collect(),
        ),
    }
}

fn guard_def(def: Def<&str>) -> Def<&str> {
    Def {
        name: def.name,
        args: def.args,
        body: guard_term(def.body),
    }
}

/// The first reserved name an expression uses (a call, a definition, a variable).
fn reserved_name<'s>(term: &Term<&'s str>) -> Option<&'s str> {
    let reserved = |name: &&'s str| is_reserved(name);
    let terms: Vec<&Term<&'s str>> = match term {
        Term::Id | Term::Recurse | Term::Num(_) => Vec::new(),
        Term::Break(x) | Term::Var(x) => return Some(*x).filter(reserved),
        Term::Str(_, parts) => parts
            .iter()
            .filter_map(|p| match p {
                StrPart::Term(t) => Some(t),
                _ => None,
            })
            .collect(),
        Term::Arr(t) => t.iter().map(|t| &**t).collect(),
        Term::Obj(entries) => entries
            .iter()
            .flat_map(|(k, v)| std::iter::once(k).chain(v))
            .collect(),
        Term::Neg(t) => vec![&**t],
        Term::BinOp(l, op, r) => {
            if let BinaryOp::Pipe(Some(p)) = op
                && let Some(name) = pattern_reserved(p)
            {
                return Some(name);
            }
            vec![&**l, &**r]
        }
        Term::Label(x, t) => {
            if reserved(x) {
                return Some(*x);
            }
            vec![&**t]
        }
        Term::Fold(_, xs, p, args) => {
            if let Some(name) = pattern_reserved(p) {
                return Some(name);
            }
            std::iter::once(&**xs).chain(args).collect()
        }
        Term::TryCatch(t, c) => std::iter::once(&**t).chain(c.as_deref()).collect(),
        Term::IfThenElse(branches, otherwise) => branches
            .iter()
            .flat_map(|(c, t)| [c, t])
            .chain(otherwise.as_deref())
            .collect(),
        Term::Def(defs, t) => {
            for def in defs {
                if let Some(name) = std::iter::once(&def.name)
                    .chain(&def.args)
                    .find(|n| reserved(n))
                {
                    return Some(*name);
                }
                if let Some(name) = reserved_name(&def.body) {
                    return Some(name);
                }
            }
            vec![&**t]
        }
        Term::Call(name, args) => {
            if reserved(name) {
                return Some(*name);
            }
            args.iter().collect()
        }
        Term::Path(t, path) => std::iter::once(&**t)
            .chain(path.0.iter().flat_map(|(part, _)| match part {
                Part::Index(i) => vec![i],
                Part::Range(from, to) => from.iter().chain(to).collect(),
            }))
            .collect(),
    };
    terms.into_iter().find_map(reserved_name)
}

fn pattern_reserved<'s>(pattern: &Pattern<&'s str>) -> Option<&'s str> {
    match pattern {
        Pattern::Var(x) => Some(*x).filter(|x| is_reserved(x)),
        Pattern::Arr(items) => items.iter().find_map(pattern_reserved),
        Pattern::Obj(entries) => entries
            .iter()
            .find_map(|(k, p)| reserved_name(k).or_else(|| pattern_reserved(p))),
    }
}

/// The definitions every expression is compiled with: the checked natives first (the
/// standard library uses them), then jaq's core, std and JSON definitions, rewritten.
fn prelude<'s>() -> impl Iterator<Item = Def<&'s str>> {
    let guards = jaq_core::load::parse(GUARD_DEFS, |p| p.defs()).expect("the guards parse");
    let library = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs())
        .map(guard_def);
    guards.into_iter().chain(library).map(shorten)
}

/// A definition of the standard library, as one of an expression's.
fn shorten<'s>(def: Def<&'static str>) -> Def<&'s str> {
    def
}

/// The native filters: jaq's, with `range` metered, the guarded ones renamed, the excluded
/// ones left out, and the checks the rewrite calls.
fn natives() -> impl Iterator<Item = jaq_core::native::Fun<Data>> {
    let range = ("range", v(3), Native::<Data>::new(metered_range));
    let checks = [
        ("_patchbay_depth", v(0), Native::<Data>::new(depth_guard)),
        ("_patchbay_mul", v(2), Native::<Data>::new(checked_mul)),
        (
            "_patchbay_explode_check",
            v(0),
            Native::<Data>::new(explode_check),
        ),
        (
            "_patchbay_json_check",
            v(0),
            Native::<Data>::new(json_check),
        ),
    ];
    jaq_core::funs::<Data>()
        .filter(|(name, _, _)| *name != "range")
        .chain([range])
        .chain(jaq_std::funs::<Data>())
        .chain(jaq_json::funs::<Data>())
        .filter(|(name, _, _)| !EXCLUDED.contains(name))
        .map(|(name, args, native)| {
            let renamed = GUARDED_NATIVES.iter().find(|(from, _)| *from == name);
            (renamed.map_or(name, |(_, to)| *to), args, native)
        })
        .chain(checks)
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
        // Loaded as written first, so that syntax errors point into the expression.
        let arena = Arena::default();
        Loader::new([])
            .load(&arena, File { code, path: () })
            .map_err(|errors| describe_load_errors(code, errors))?;
        let term = jaq_core::load::parse(code, |p| p.term()).ok_or_else(|| CompileError {
            problems: vec!["`module`, `import` and `include` are not supported".to_owned()],
        })?;
        if let Some(name) = reserved_name(&term) {
            return Err(CompileError {
                problems: vec![format!(
                    "`{name}`{}: names starting with `_patchbay` are reserved",
                    at(code, name)
                )],
            });
        }
        // Then compiled rewritten (see the module documentation), as the body of a
        // definition after the standard library's.
        let main = Def {
            name: "_patchbay_main",
            args: Vec::new(),
            body: guard_term(term),
        };
        let modules = Loader::new(prelude().chain([main]))
            .load(
                &arena,
                File {
                    code: "_patchbay_main",
                    path: (),
                },
            )
            .map_err(|errors| describe_load_errors(code, errors))?;
        let filter = jaq_core::Compiler::default()
            .with_funs(natives())
            .compile(modules)
            .map_err(|errors| describe_compile_errors(code, errors))?;
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

fn describe_compile_errors(
    code: &str,
    errors: jaq_core::compile::Errors<&str, ()>,
) -> CompileError {
    use jaq_core::compile::Undefined;
    let mut messages = Vec::new();
    for (_file, items) in errors {
        for (name, undefined) in items {
            let what = match undefined {
                Undefined::Filter(arity) => format!("filter `{name}/{arity}`"),
                other => format!("{} `{name}`", other.as_str()),
            };
            messages.push(format!("undefined {what}{}", at(code, name)));
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
