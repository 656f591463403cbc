//! Plans: which tensors to load and how (select, rename, slice, cast,
//! permute), executed by libckpt's engine into caller `Vec`s and slices.
use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::catalog::{str_at, Catalog, Tensor};
use crate::dtype::{as_bytes, as_bytes_mut, check_typed, Dtype, Element};
use crate::error::{Error, RawError, Result};
use crate::util::{cpath, cstring, progress_call, Progress};
use crate::value::Node;
use crate::writer::WriterOptions;
use crate::sys;

/// How the engine reads files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IoMode {
    /// O_DIRECT for data not in the page cache, on local disks.
    #[default]
    Auto,
    /// Always through the page cache.
    Buffered,
    /// O_DIRECT where the file system allows it.
    Direct,
}

/// Options of [`Plan::load`]; `Default` is libckpt's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Reader threads; 0: libckpt's choice (one per CPU, more for O_DIRECT).
    pub threads: u32,
    /// Bytes per task and per bounce buffer; 0: libckpt's choice (8 MiB,
    /// less when many threads would take the ring past 48 MiB).
    pub chunk_bytes: u64,
    pub io: IoMode,
    /// Use io_uring when the kernel offers it.
    pub io_uring: bool,
    /// Items with no buffer that need no conversion become zero-copy views
    /// of the file ([`PlanItem::data`]) instead of library buffers.
    pub views: bool,
    /// Do not check the CRC-32s of ZIP members (torch.save files, DCP
    /// files' torch.save items, .npz archives).  By default (false) a load
    /// checks every member whose bytes it reads whole
    /// ([`Status::Checksum`](crate::Status::Checksum) naming the member on a
    /// mismatch); views, slices and storages with bytes no tensor shows go
    /// unchecked either way.
    pub skip_crc_check: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { threads: 0, chunk_bytes: 0, io: IoMode::Auto, io_uring: true, views: false, skip_crc_check: false }
    }
}

/// What the last load did (`ckpt_load_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadStats {
    pub bytes_needed: u64,
    pub bytes_read: u64,
    pub reads: u64,
    pub tasks: u64,
    pub threads: u32,
    /// Bounce memory the engine allocated.
    pub ring_bytes: u64,
    pub direct: bool,
    pub io_uring: bool,
    pub views: u64,
}

/// A plan over a catalog (`ckpt_plan`): starts with every tensor,
/// unchanged; rules (applied at once, in the order added, to the tensors
/// whose name *in the checkpoint* matches a glob) select, rename, slice,
/// cast and permute; [`load`](Self::load) then reads everything with
/// parallel I/O and a bounded bounce ring.
///
/// `'c` is the catalog's borrow, `'b` that of the caller buffers given to
/// [`set_buffer`](Self::set_buffer): both outlive the plan.
pub struct Plan<'c, 'b> {
    raw: NonNull<sys::ckpt_plan>,
    catalog: &'c Catalog,
    buffers_set: bool,
    /// Items' data pointers are current (a load succeeded and no rule came since).
    loaded: bool,
    /// Sources of the items whose library buffer was taken.
    taken: Vec<*const sys::ckpt_tensor_info>,
    _buffers: PhantomData<&'b mut [u8]>,
}

// SAFETY: a plan is used from one thread at a time (&mut for every change);
// the catalog it points to is Sync.
unsafe impl Send for Plan<'_, '_> {}

impl Drop for Plan<'_, '_> {
    fn drop(&mut self) {
        unsafe { sys::ckpt_plan_free(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Plan<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.items()).finish()
    }
}

fn pattern(p: &str) -> Result<std::ffi::CString> {
    cstring(p, "pattern")
}

impl<'c, 'b> Plan<'c, 'b> {
    pub(crate) fn new(catalog: &'c Catalog) -> Result<Plan<'c, 'b>> {
        let err = RawError::new();
        let mut out = ptr::null_mut();
        err.check(unsafe { sys::ckpt_plan_create(catalog.raw(), &mut out, err.ptr()) })?;
        Ok(Plan {
            raw: NonNull::new(out).expect("ckpt_plan_create succeeded without a plan"),
            catalog,
            buffers_set: false,
            loaded: false,
            taken: Vec::new(),
            _buffers: PhantomData,
        })
    }

    fn raw(&self) -> *mut sys::ckpt_plan {
        self.raw.as_ptr()
    }

    /// Rules change item sizes and dtypes: once buffers are set, refuse them.
    fn rule(&mut self, f: impl FnOnce(*mut sys::ckpt_plan, *mut sys::ckpt_error) -> sys::ckpt_status) -> Result<&mut Self> {
        if self.buffers_set {
            return Err(Error::state("plan rules must come before set_buffer (they change the items' sizes)"));
        }
        self.loaded = false;
        let err = RawError::new();
        err.check(f(self.raw(), err.ptr()))?;
        Ok(self)
    }

    /// The catalog it reads.
    pub fn catalog(&self) -> &'c Catalog {
        self.catalog
    }

    /// The catalog's object tree as this plan's output has it (what a
    /// conversion records: tensors under their new names, dropped ones
    /// taken out), as values; None when the catalog has none.  Each call
    /// makes it anew in the plan's memory, which keeps it until the plan is
    /// dropped: call it once the rules are set.
    pub fn tree(&mut self) -> Result<Option<Node<'_>>> {
        let err = RawError::new();
        let mut out = ptr::null();
        err.check(unsafe { sys::ckpt_plan_tree(self.raw(), &mut out, err.ptr()) })?;
        // SAFETY: the plan keeps what it made until it is freed; the values
        // it shares with the catalog live longer.
        Ok(unsafe { Node::from_raw(out) })
    }

    /// Keeps only tensors matching `pattern` (the first call replaces
    /// "every tensor", later ones add).
    pub fn select(&mut self, pattern_: &str) -> Result<&mut Self> {
        let p = pattern(pattern_)?;
        self.rule(|plan, e| unsafe { sys::ckpt_plan_select(plan, p.as_ptr(), e) })
    }

    /// Drops the selected tensors matching `pattern`.
    pub fn exclude(&mut self, pattern_: &str) -> Result<&mut Self> {
        let p = pattern(pattern_)?;
        self.rule(|plan, e| unsafe { sys::ckpt_plan_exclude(plan, p.as_ptr(), e) })
    }

    /// Renames: a prefix (`"model."` → `""`) or a `*` glob
    /// (`"layers.*.attn.*"` → `"h.*.attention.*"`); see `ckpt_plan_rename`.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<&mut Self> {
        let (f, t) = (cstring(from, "rename source")?, cstring(to, "rename target")?);
        self.rule(|plan, e| unsafe { sys::ckpt_plan_rename(plan, f.as_ptr(), t.as_ptr(), e) })
    }

    /// Casts matching float tensors to a float `dtype` (or widens integers),
    /// bit-exact with torch's `.to()`.
    pub fn cast(&mut self, pattern_: &str, dtype: Dtype) -> Result<&mut Self> {
        let p = pattern(pattern_)?;
        self.rule(|plan, e| unsafe { sys::ckpt_plan_cast(plan, p.as_ptr(), dtype.raw(), e) })
    }

    /// Keeps elements `range` of dimension `dim` (negative: from the last).
    pub fn slice(&mut self, pattern_: &str, dim: i32, range: Range<u64>) -> Result<&mut Self> {
        let p = pattern(pattern_)?;
        self.rule(|plan, e| unsafe { sys::ckpt_plan_slice(plan, p.as_ptr(), dim, range.start, range.end, e) })
    }

    /// Tensor-parallel part `rank` of `parts` along `dim` (torch.tensor_split cuts).
    pub fn split(&mut self, pattern_: &str, dim: i32, rank: u64, parts: u64) -> Result<&mut Self> {
        let p = pattern(pattern_)?;
        self.rule(|plan, e| unsafe { sys::ckpt_plan_split(plan, p.as_ptr(), dim, rank, parts, e) })
    }

    /// Reorders axes: output axis i is input axis `perm[i]`.
    pub fn permute(&mut self, pattern_: &str, perm: &[u32]) -> Result<&mut Self> {
        let p = pattern(pattern_)?;
        let n = perm.len() as u32;
        self.rule(|plan, e| unsafe { sys::ckpt_plan_permute(plan, p.as_ptr(), n, perm.as_ptr(), e) })
    }

    /// Transposes matching 2-D tensors.
    pub fn transpose(&mut self, pattern_: &str) -> Result<&mut Self> {
        let p = pattern(pattern_)?;
        self.rule(|plan, e| unsafe { sys::ckpt_plan_transpose(plan, p.as_ptr(), e) })
    }

    /// Converts a lettered layout, e.g. `"OIHW"` → `"HWIO"`.
    pub fn layout(&mut self, pattern_: &str, from: &str, to: &str) -> Result<&mut Self> {
        let p = pattern(pattern_)?;
        let (f, t) = (cstring(from, "layout")?, cstring(to, "layout")?);
        self.rule(|plan, e| unsafe { sys::ckpt_plan_layout(plan, p.as_ptr(), f.as_ptr(), t.as_ptr(), e) })
    }

    /// Number of selected tensors.
    pub fn len(&self) -> usize {
        unsafe { sys::ckpt_plan_count(self.raw()) }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The i-th item (catalog order).
    pub fn item(&self, i: usize) -> Option<PlanItem<'_>> {
        unsafe { sys::ckpt_plan_item_at(self.raw(), i).as_ref() }.map(|raw| PlanItem { raw, catalog: self.catalog })
    }

    /// The items, in catalog order.
    pub fn items(&self) -> impl ExactSizeIterator<Item = PlanItem<'_>> + '_ {
        (0..self.len()).map(move |i| self.item(i).expect("plan item in range"))
    }

    /// The item with this (new) name and its index.
    pub fn find(&self, name: &str) -> Option<(usize, PlanItem<'_>)> {
        let c = cstring(name, "tensor name").ok()?;
        let mut index = 0usize;
        let p = unsafe { sys::ckpt_plan_find(self.raw(), c.as_ptr(), &mut index) };
        unsafe { p.as_ref() }.map(|raw| (index, PlanItem { raw, catalog: self.catalog }))
    }

    /// Loads item `i` into `buffer`, which must hold its dtype after casts
    /// (see [`Element`]) and exactly its element count.  The buffer stays
    /// borrowed until the plan is dropped; rules may no longer be added.
    pub fn set_buffer<T: Element>(&mut self, i: usize, buffer: &'b mut [T]) -> Result<()> {
        let item = self.item(i).ok_or_else(|| Error::argument(None, format!("no plan item {}", i)))?;
        check_typed::<T>(item.dtype(), item.numel(), buffer.len(), item.name())?;
        let bytes = as_bytes_mut(buffer);
        self.buffers_set = true;
        let err = RawError::new();
        err.check(unsafe {
            sys::ckpt_plan_set_buffer(self.raw(), i, bytes.as_mut_ptr() as *mut _, bytes.len() as u64, err.ptr())
        })
    }

    /// Like [`set_buffer`](Self::set_buffer), for raw bytes of any dtype
    /// (packed F4/F6 included): `buffer.len()` must be the item's nbytes.
    pub fn set_buffer_bytes(&mut self, i: usize, buffer: &'b mut [u8]) -> Result<()> {
        let item = self.item(i).ok_or_else(|| Error::argument(None, format!("no plan item {}", i)))?;
        if buffer.len() as u64 != item.nbytes() {
            return Err(Error::argument(
                Some(item.name()),
                format!("tensor '{}' has {} bytes, the buffer {}", item.name(), item.nbytes(), buffer.len()),
            ));
        }
        self.buffers_set = true;
        let err = RawError::new();
        err.check(unsafe {
            sys::ckpt_plan_set_buffer(self.raw(), i, buffer.as_mut_ptr() as *mut _, buffer.len() as u64, err.ptr())
        })
    }

    /// Loads every item: into its buffer, else (with `views`) as a view of
    /// the file, else into a buffer libckpt allocates (see
    /// [`PlanItem::data`], [`take`](Self::take)).  May be called again (reloads).
    pub fn load(&mut self, options: &LoadOptions) -> Result<LoadStats> {
        self.load_with_progress(options, |_, _| true)
    }

    /// [`load`](Self::load) with a callback `(done, total) -> keep going`
    /// run on the calling thread; returning false cancels.
    pub fn load_with_progress<F: FnMut(u64, u64) -> bool>(&mut self, options: &LoadOptions, progress: F) -> Result<LoadStats> {
        // SAFETY: zeroed storage for ckpt_load_options_init_sized to fill.
        let mut o = unsafe { sys::Reserved::<sys::ckpt_load_options>::zeroed() };
        unsafe { sys::ckpt_load_options_init_sized(&mut o.value, std::mem::size_of::<sys::ckpt_load_options>()) };
        o.value.threads = options.threads;
        o.value.chunk_bytes = options.chunk_bytes;
        o.value.io = match options.io {
            IoMode::Auto => sys::CKPT_IO_AUTO,
            IoMode::Buffered => sys::CKPT_IO_BUFFERED,
            IoMode::Direct => sys::CKPT_IO_DIRECT,
        };
        o.value.io_uring = if options.io_uring { 0 } else { -1 };
        o.value.views = options.views as i32;
        o.value.skip_crc_check = options.skip_crc_check as i32;
        let mut p = Progress::new(progress);
        o.value.progress = Some(progress_call::<F>);
        o.value.user = p.user();
        let err = RawError::new();
        self.loaded = false;
        self.taken.clear();
        let st = unsafe { sys::ckpt_load(self.raw(), &o.value, err.ptr()) };
        p.finish();
        err.check(st)?;
        self.loaded = true;
        Ok(self.stats())
    }

    /// Allocates a typed `Vec` for every item (`f32` for F32, `u16` for
    /// BF16, …, see [`TensorData`]), loads straight into them and returns
    /// them with their names and shapes.  No zeroing pass: the engine's
    /// reads are the first touch of the memory.
    pub fn load_vecs(self, options: &LoadOptions) -> Result<Vec<Loaded>> {
        if self.buffers_set {
            return Err(Error::state("load_vecs allocates every buffer itself: do not set buffers first"));
        }
        let mut out = Vec::with_capacity(self.len());
        let mut lens = Vec::with_capacity(self.len());
        for item in self.items() {
            let too_large = || Error::argument(Some(item.name()), "tensor too large for this machine".into());
            let n = usize::try_from(item.numel()).map_err(|_| too_large())?;
            let nbytes = usize::try_from(item.nbytes()).map_err(|_| too_large())?;
            let data = TensorData::with_capacity(item.dtype(), n, nbytes);
            lens.push(if let TensorData::Bytes(..) = data { nbytes } else { n });
            out.push(Loaded { name: item.name().to_string(), dtype: item.dtype(), shape: item.shape().to_vec(), data });
        }
        let mut plan = self;
        for (i, l) in out.iter_mut().enumerate() {
            let ptr = l.data.spare();
            let nbytes = plan.item(i).map(|it| it.nbytes()).unwrap_or(0);
            let err = RawError::new();
            // SAFETY: each Vec has capacity for the item's bytes and outlives
            // the load below; the plan is dropped before the Vecs are handed out.
            err.check(unsafe { sys::ckpt_plan_set_buffer(plan.raw(), i, ptr as *mut _, nbytes, err.ptr()) })?;
        }
        plan.buffers_set = true;
        plan.load(options)?;
        drop(plan);
        for (l, n) in out.iter_mut().zip(lens) {
            // SAFETY: ckpt_load succeeded, so every byte of every item was written.
            unsafe { l.data.assume_filled(n) };
        }
        Ok(out)
    }

    /// After a load: item `i`'s bytes (dense, row-major, little-endian),
    /// wherever they landed (caller buffer, view, library buffer); None
    /// before a load, after a rule changed the plan, or after [`take`](Self::take).
    pub fn data(&self, i: usize) -> Option<&[u8]> {
        if !self.loaded {
            return None;
        }
        let item = self.item(i)?;
        if item.raw.data.is_null() || self.taken.contains(&item.raw.source) {
            return None;
        }
        Some(unsafe { std::slice::from_raw_parts(item.raw.data as *const u8, item.raw.nbytes as usize) })
    }

    /// What the last load did.
    pub fn stats(&self) -> LoadStats {
        // SAFETY: zeroed storage for ckpt_plan_stats to fill.
        let mut s = unsafe { sys::Reserved::<sys::ckpt_load_stats>::zeroed() };
        unsafe { sys::ckpt_plan_stats(self.raw(), &mut s.value) };
        let s = &s.value;
        LoadStats {
            bytes_needed: s.bytes_needed,
            bytes_read: s.bytes_read,
            reads: s.reads,
            tasks: s.tasks,
            threads: s.threads,
            ring_bytes: s.ring_bytes,
            direct: s.direct != 0,
            io_uring: s.io_uring != 0,
            views: s.views,
        }
    }

    /// After a load: takes the buffer libckpt allocated for item `i` (None
    /// for a caller buffer or a view).
    pub fn take(&mut self, i: usize) -> Option<Buffer> {
        let item = self.item(i)?;
        let (nbytes, source) = (item.nbytes() as usize, item.raw.source);
        let p = unsafe { sys::ckpt_plan_take(self.raw(), i) };
        let buffer = NonNull::new(p as *mut u8).map(|ptr| Buffer { ptr, len: nbytes })?;
        self.taken.push(source);
        Some(buffer)
    }

    /// Compares the plan with what a model expects (names after renames,
    /// shapes after slices and permutations, dtypes after casts), reading no
    /// data.  `cast`: cast float tensors to the expected float dtype instead
    /// of reporting them; `prune`: then drop unexpected and mismatched ones.
    pub fn match_expected(&mut self, expected: &[Expected], cast: bool, prune: bool) -> Result<Vec<Mismatch>> {
        if self.buffers_set && (cast || prune) {
            return Err(Error::state("match with cast or prune changes the plan: do it before set_buffer"));
        }
        if cast || prune {
            self.loaded = false;
        }
        let names: Vec<std::ffi::CString> = expected.iter().map(|e| cstring(&e.name, "tensor name")).collect::<Result<_>>()?;
        let raw: Vec<sys::ckpt_expected> = expected
            .iter()
            .zip(&names)
            .map(|(e, n)| sys::ckpt_expected {
                name: n.as_ptr(),
                dtype: e.dtype.map(|d| d.raw()).unwrap_or(sys::CKPT_DTYPE_INVALID),
                ndim: e.shape.len() as u32,
                shape: e.shape.as_ptr(),
            })
            .collect();
        let flags = if cast { sys::CKPT_MATCH_CAST } else { 0 } | if prune { sys::CKPT_MATCH_PRUNE } else { 0 };
        let mut entries: *const sys::ckpt_match_entry = ptr::null();
        let mut count = 0usize;
        let err = RawError::new();
        err.check(unsafe {
            sys::ckpt_plan_match(self.raw(), raw.as_ptr(), raw.len(), flags, &mut entries, &mut count, err.ptr())
        })?;
        let mut out = Vec::with_capacity(count);
        for k in 0..count {
            let e = unsafe { &*entries.add(k) };
            let name = unsafe { str_at(e.name) }.unwrap_or("").to_string();
            let expected_index = if e.expected == usize::MAX { None } else { Some(e.expected) };
            let item = if e.item == usize::MAX { None } else { Some(e.item) };
            out.push(match e.kind {
                sys::CKPT_MATCH_MISSING => Mismatch::Missing { name, expected: expected_index.unwrap_or(0) },
                sys::CKPT_MATCH_UNEXPECTED => Mismatch::Unexpected { name, item: item.unwrap_or(0) },
                sys::CKPT_MATCH_SHAPE => Mismatch::Shape { name, expected: expected_index.unwrap_or(0), item: item.unwrap_or(0) },
                _ => Mismatch::Dtype { name, expected: expected_index.unwrap_or(0), item: item.unwrap_or(0) },
            });
        }
        Ok(out)
    }

    /// Writes the plan's tensors (new names, slices, dtypes, axis orders) as
    /// a new checkpoint, streamed (`ckpt_convert_plan`).
    pub fn convert<P: AsRef<Path>>(&mut self, dst: P, options: &WriterOptions) -> Result<()> {
        let dst = cpath(dst.as_ref())?;
        let opts = options.raw()?;
        let err = RawError::new();
        err.check(unsafe { sys::ckpt_convert_plan(self.raw(), dst.as_ptr(), &opts.value.value, err.ptr()) })
    }

    /// [`convert`](Self::convert) with a callback `(done, total) -> keep going`;
    /// returning false cancels (`Status::Cancelled`, nothing left behind).
    pub fn convert_with_progress<P, F>(&mut self, dst: P, options: &WriterOptions, progress: F) -> Result<()>
    where
        P: AsRef<Path>,
        F: FnMut(u64, u64) -> bool,
    {
        let dst = cpath(dst.as_ref())?;
        let mut opts = options.raw()?;
        let err = RawError::new();
        let mut p = Progress::new(progress);
        opts.value.value.progress = Some(progress_call::<F>);
        opts.value.value.user = p.user();
        let st = unsafe { sys::ckpt_convert_plan(self.raw(), dst.as_ptr(), &opts.value.value, err.ptr()) };
        p.finish();
        err.check(st)
    }
}

/// One item of a plan: the tensor as it will be loaded.
#[derive(Clone, Copy)]
pub struct PlanItem<'p> {
    raw: &'p sys::ckpt_plan_item,
    catalog: &'p Catalog,
}

impl fmt::Debug for PlanItem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlanItem")
            .field("name", &self.name())
            .field("source", &self.source().name())
            .field("dtype", &self.dtype())
            .field("shape", &self.shape())
            .finish()
    }
}

impl<'p> PlanItem<'p> {
    /// The name after renames.
    pub fn name(&self) -> &'p str {
        unsafe { str_at(self.raw.name) }.unwrap_or("")
    }

    /// The tensor in the catalog.
    pub fn source(&self) -> Tensor<'p> {
        // SAFETY: the source is a tensor of the plan's catalog.
        Tensor::from_raw(self.catalog, unsafe { &*self.raw.source })
    }

    /// The dtype after casts.
    pub fn dtype(&self) -> Dtype {
        Dtype::from_raw(self.raw.dtype)
    }

    /// The shape after slices and permutations.
    pub fn shape(&self) -> &'p [u64] {
        if self.raw.ndim == 0 {
            &[]
        } else {
            unsafe { std::slice::from_raw_parts(self.raw.shape, self.raw.ndim as usize) }
        }
    }

    pub fn numel(&self) -> u64 {
        self.raw.numel
    }

    pub fn nbytes(&self) -> u64 {
        self.raw.nbytes
    }

    /// Whether loading converts bytes (cast, axis order, byte order, gather).
    pub fn needs_transform(&self) -> bool {
        self.raw.transform != 0
    }

    /// After a load: whether the data is a view of the file.
    pub fn is_view(&self) -> bool {
        self.raw.is_view != 0
    }

}

/// A buffer libckpt allocated (64-byte aligned), taken from a plan;
/// released by `ckpt_free` when dropped.
pub struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
}

unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer").field("len", &self.len).finish()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        unsafe { sys::ckpt_free(self.ptr.as_ptr() as *mut _) }
    }
}

impl std::ops::Deref for Buffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Buffer {
    /// The bytes as elements of `T` (the buffer is 64-byte aligned).
    pub fn as_slice_of<T: Element>(&self) -> Option<&[T]> {
        let size = std::mem::size_of::<T>();
        if self.len % size != 0 || (self.ptr.as_ptr() as usize) % std::mem::align_of::<T>() != 0 {
            return None;
        }
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr() as *const T, self.len / size) })
    }
}

/// What a model expects of one tensor (for [`Plan::match_expected`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    pub name: String,
    /// None: any dtype.
    pub dtype: Option<Dtype>,
    pub shape: Vec<u64>,
}

/// One difference between a plan and a model skeleton; indexes point into
/// the expected slice and the plan's items (before pruning).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mismatch {
    Missing { name: String, expected: usize },
    Unexpected { name: String, item: usize },
    Shape { name: String, expected: usize, item: usize },
    Dtype { name: String, expected: usize, item: usize },
}

/// A loaded tensor, in a `Vec` of the Rust type that holds its dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub data: TensorData,
}

/// A tensor's elements in a typed `Vec`.  F16 and BF16 come as their bits
/// (`u16`); BOOL and the float8 types as bytes; F4/F6 packed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TensorData {
    F64(Vec<f64>),
    F32(Vec<f32>),
    F16(Vec<u16>),
    BF16(Vec<u16>),
    C64(Vec<[f32; 2]>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    I16(Vec<i16>),
    I8(Vec<i8>),
    U64(Vec<u64>),
    U32(Vec<u32>),
    U16(Vec<u16>),
    U8(Vec<u8>),
    Bool(Vec<u8>),
    /// float8, F4/F6 (packed) or a dtype this binding does not name: bytes.
    Bytes(Dtype, Vec<u8>),
}

macro_rules! each_vec {
    ($self:expr, $v:ident => $e:expr) => {
        match $self {
            TensorData::F64($v) => $e,
            TensorData::F32($v) => $e,
            TensorData::F16($v) => $e,
            TensorData::BF16($v) => $e,
            TensorData::C64($v) => $e,
            TensorData::I64($v) => $e,
            TensorData::I32($v) => $e,
            TensorData::I16($v) => $e,
            TensorData::I8($v) => $e,
            TensorData::U64($v) => $e,
            TensorData::U32($v) => $e,
            TensorData::U16($v) => $e,
            TensorData::U8($v) => $e,
            TensorData::Bool($v) => $e,
            TensorData::Bytes(_, $v) => $e,
        }
    };
}

impl TensorData {
    fn with_capacity(dtype: Dtype, numel: usize, nbytes: usize) -> TensorData {
        match dtype {
            Dtype::F64 => TensorData::F64(Vec::with_capacity(numel)),
            Dtype::F32 => TensorData::F32(Vec::with_capacity(numel)),
            Dtype::F16 => TensorData::F16(Vec::with_capacity(numel)),
            Dtype::BF16 => TensorData::BF16(Vec::with_capacity(numel)),
            Dtype::C64 => TensorData::C64(Vec::with_capacity(numel)),
            Dtype::I64 => TensorData::I64(Vec::with_capacity(numel)),
            Dtype::I32 => TensorData::I32(Vec::with_capacity(numel)),
            Dtype::I16 => TensorData::I16(Vec::with_capacity(numel)),
            Dtype::I8 => TensorData::I8(Vec::with_capacity(numel)),
            Dtype::U64 => TensorData::U64(Vec::with_capacity(numel)),
            Dtype::U32 => TensorData::U32(Vec::with_capacity(numel)),
            Dtype::U16 => TensorData::U16(Vec::with_capacity(numel)),
            Dtype::U8 => TensorData::U8(Vec::with_capacity(numel)),
            Dtype::Bool => TensorData::Bool(Vec::with_capacity(numel)),
            d => TensorData::Bytes(d, Vec::with_capacity(nbytes)),
        }
    }

    /// The start of the spare capacity.
    fn spare(&mut self) -> *mut u8 {
        each_vec!(self, v => v.as_mut_ptr() as *mut u8)
    }

    /// Marks the first `n` elements as initialised.
    unsafe fn assume_filled(&mut self, n: usize) {
        each_vec!(self, v => { debug_assert!(n <= v.capacity()); v.set_len(n) })
    }

    /// The dtype of the data.
    pub fn dtype(&self) -> Dtype {
        match self {
            TensorData::F64(_) => Dtype::F64,
            TensorData::F32(_) => Dtype::F32,
            TensorData::F16(_) => Dtype::F16,
            TensorData::BF16(_) => Dtype::BF16,
            TensorData::C64(_) => Dtype::C64,
            TensorData::I64(_) => Dtype::I64,
            TensorData::I32(_) => Dtype::I32,
            TensorData::I16(_) => Dtype::I16,
            TensorData::I8(_) => Dtype::I8,
            TensorData::U64(_) => Dtype::U64,
            TensorData::U32(_) => Dtype::U32,
            TensorData::U16(_) => Dtype::U16,
            TensorData::U8(_) => Dtype::U8,
            TensorData::Bool(_) => Dtype::Bool,
            TensorData::Bytes(d, _) => *d,
        }
    }

    /// The raw little-endian bytes.
    pub fn as_bytes(&self) -> &[u8] {
        each_vec!(self, v => as_bytes(v.as_slice()))
    }

    /// The elements as `&[T]` when `T` is this data's element type.
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        each_vec!(self, v => (v as &dyn Any).downcast_ref::<Vec<T>>().map(|v| v.as_slice()))
    }

    /// The `Vec<T>` when `T` is this data's element type, else `self` back.
    pub fn into_vec<T: Element>(self) -> std::result::Result<Vec<T>, TensorData> {
        let ok = self.as_slice::<T>().is_some();
        if !ok {
            return Err(self);
        }
        each_vec!(self, v => {
            let mut boxed: Box<dyn Any> = Box::new(v);
            match boxed.downcast_mut::<Vec<T>>() {
                Some(t) => Ok(std::mem::take(t)),
                None => unreachable!(),
            }
        })
    }
}

