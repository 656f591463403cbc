//! The object tree of a torch file (a DCP checkpoint, a Flax document) as
//! the library's values, read through `ckpt.h`'s accessors: no JSON.
use std::ffi::CStr;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::sys;

/// A value of an object tree, borrowed from the catalog or the plan that
/// gave it (`'a`).  [`get`](Self::get) says what it is; containers give
/// their items as more `Node`s, so that a walk of any depth is the
/// caller's loop, never recursion here.
#[derive(Clone, Copy)]
pub struct Node<'a> {
    raw: NonNull<sys::ckpt_value>,
    _owner: PhantomData<&'a ()>,
}

// SAFETY: values are read-only and live as long as their owner ('a); the
// accessors only read them, from any thread (ckpt.h).
unsafe impl Send for Node<'_> {}
unsafe impl Sync for Node<'_> {}

/// What a [`Node`] holds (the kinds of `ckpt_value_kind`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// A number read from JSON text that is neither an i64 nor a double, as written.
    Number(&'a str),
    Str(&'a str),
    Bytes(&'a [u8]),
    /// An int beyond i64: little-endian two's complement bytes.
    BigInt(&'a [u8]),
    /// A tensor by name (the catalog's, or the plan's output name).
    Tensor(&'a str),
    /// A class or function, "module.name".
    Global(&'a str),
    List(Items<'a>),
    /// `class`: "torch.Size", or None for a plain tuple.
    Tuple { class: Option<&'a str>, items: Items<'a> },
    Set(Items<'a>),
    /// A reconstructor call: the callable ("module.name"), its args and the state BUILD gave.
    Call { callable: &'a str, args: Items<'a>, state: Option<Node<'a>> },
    /// Key/value pairs in order; `class`: "collections.OrderedDict" or None; an OrderedDict's state.
    Dict { class: Option<&'a str>, pairs: Pairs<'a>, state: Option<Node<'a>> },
    /// String-keyed pairs in order: any other JSON object (`{"__shards__": […]}`).
    Object(Pairs<'a>),
}

/// The items of a list, tuple, set or call.
#[derive(Clone, Copy)]
pub struct Items<'a>(Node<'a>);

/// The key/value pairs of a dict or an object.
#[derive(Clone, Copy)]
pub struct Pairs<'a>(Node<'a>);

impl<'a> Node<'a> {
    /// SAFETY: `raw` is NULL or a value that lives for `'a`.
    pub(crate) unsafe fn from_raw(raw: *const sys::ckpt_value) -> Option<Node<'a>> {
        NonNull::new(raw as *mut sys::ckpt_value).map(|raw| Node { raw, _owner: PhantomData })
    }

    fn ptr(&self) -> *const sys::ckpt_value {
        self.raw.as_ptr()
    }

    fn text(&self) -> &'a [u8] {
        let mut len = 0usize;
        // SAFETY: the value lives for 'a; the text (len bytes) lives with it.
        unsafe {
            let p = sys::ckpt_value_text(self.ptr(), &mut len);
            if p.is_null() {
                &[]
            } else {
                std::slice::from_raw_parts(p as *const u8, len)
            }
        }
    }

    /// Text the library keeps as UTF-8 (it checks what it reads); any other reads as U+FFFD.
    fn str(&self) -> &'a str {
        std::str::from_utf8(self.text()).unwrap_or("\u{FFFD}")
    }

    fn class(&self) -> Option<&'a str> {
        // SAFETY: NULL or a NUL-terminated string that lives with the value.
        unsafe {
            let p = sys::ckpt_value_class(self.ptr());
            if p.is_null() {
                None
            } else {
                CStr::from_ptr(p).to_str().ok()
            }
        }
    }

    fn state(&self) -> Option<Node<'a>> {
        unsafe { Node::from_raw(sys::ckpt_value_state(self.ptr())) }
    }

    /// What this value is.
    pub fn get(&self) -> Value<'a> {
        let p = self.ptr();
        // SAFETY: p is a live value; each accessor only reads it.
        match unsafe { sys::ckpt_value_kind_of(p) } {
            sys::CKPT_VALUE_BOOL => Value::Bool(unsafe { sys::ckpt_value_bool(p) } != 0),
            sys::CKPT_VALUE_INT => Value::Int(unsafe { sys::ckpt_value_int(p) }),
            sys::CKPT_VALUE_FLOAT => Value::Float(unsafe { sys::ckpt_value_float(p) }),
            sys::CKPT_VALUE_NUMBER => Value::Number(self.str()),
            sys::CKPT_VALUE_STRING => Value::Str(self.str()),
            sys::CKPT_VALUE_BYTES => Value::Bytes(self.text()),
            sys::CKPT_VALUE_BIGINT => Value::BigInt(self.text()),
            sys::CKPT_VALUE_TENSOR => Value::Tensor(self.str()),
            sys::CKPT_VALUE_GLOBAL => Value::Global(self.str()),
            sys::CKPT_VALUE_LIST => Value::List(Items(*self)),
            sys::CKPT_VALUE_TUPLE => Value::Tuple { class: self.class(), items: Items(*self) },
            sys::CKPT_VALUE_SET => Value::Set(Items(*self)),
            sys::CKPT_VALUE_CALL => {
                Value::Call { callable: self.class().unwrap_or(""), args: Items(*self), state: self.state() }
            }
            sys::CKPT_VALUE_DICT => Value::Dict { class: self.class(), pairs: Pairs(*self), state: self.state() },
            sys::CKPT_VALUE_OBJECT => Value::Object(Pairs(*self)),
            _ => Value::Null,
        }
    }
}

impl<'a> Items<'a> {
    pub fn len(&self) -> usize {
        unsafe { sys::ckpt_value_len(self.0.ptr()) }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Item i, or None out of range.
    pub fn get(&self, i: usize) -> Option<Node<'a>> {
        unsafe { Node::from_raw(sys::ckpt_value_item(self.0.ptr(), i)) }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = Node<'a>> + 'a {
        let items = *self;
        (0..items.len()).map(move |i| items.get(i).expect("an item within the length"))
    }
}

impl<'a> Pairs<'a> {
    pub fn len(&self) -> usize {
        unsafe { sys::ckpt_value_len(self.0.ptr()) }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pair i (key, value), or None out of range.
    pub fn get(&self, i: usize) -> Option<(Node<'a>, Node<'a>)> {
        let p = self.0.ptr();
        unsafe { Some((Node::from_raw(sys::ckpt_value_key(p, i))?, Node::from_raw(sys::ckpt_value_at(p, i))?)) }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (Node<'a>, Node<'a>)> + 'a {
        let pairs = *self;
        (0..pairs.len()).map(move |i| pairs.get(i).expect("a pair within the length"))
    }

    /// The value of the first pair whose key is the string `key`.
    pub fn find(&self, key: &str) -> Option<Node<'a>> {
        self.iter().find(|(k, _)| k.get() == Value::Str(key)).map(|(_, v)| v)
    }
}

impl fmt::Debug for Node<'_> {
    /// A leaf whole; a container by its kind and length (no recursion on the tree's depth).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.get() {
            Value::List(items) | Value::Tuple { items, .. } | Value::Set(items) | Value::Call { args: items, .. } => {
                write!(f, "<container of {} items>", items.len())
            }
            Value::Dict { pairs, .. } | Value::Object(pairs) => write!(f, "<container of {} pairs>", pairs.len()),
            leaf => leaf.fmt(f),
        }
    }
}

impl fmt::Debug for Items<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} items>", self.len())
    }
}

impl fmt::Debug for Pairs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} pairs>", self.len())
    }
}

impl PartialEq for Items<'_> {
    /// The same value (identity, not contents).
    fn eq(&self, other: &Self) -> bool {
        self.0.raw == other.0.raw
    }
}

impl PartialEq for Pairs<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0.raw == other.0.raw
    }
}

impl PartialEq for Node<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}
