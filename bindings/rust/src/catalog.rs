//! Catalogs: what a checkpoint holds (names, dtypes, shapes, metadata),
//! and reads of its tensors.
use std::ffi::{CStr, OsStr};
use std::fmt;
use std::os::raw::c_char;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};

use crate::dtype::{as_bytes_mut, check_typed, Dtype, Element};
use crate::error::{Error, RawError, Result};
use crate::plan::Plan;
use crate::util::{cpath, cstring};
use crate::value::Node;
use crate::writer::WriterOptions;
use crate::sys;

/// The format of an opened checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// One `.safetensors` file.
    Safetensors,
    /// `*.safetensors.index.json` and its shards.
    SafetensorsSharded,
    /// One `torch.save` file (zip or legacy).
    Torch,
    /// `pytorch_model.bin.index.json` and its shards.
    TorchSharded,
    /// A `.gguf` file, or gguf-split parts.
    Gguf,
    /// A torch.distributed.checkpoint directory.
    Dcp,
    /// One NumPy `.npy` array.
    Npy,
    /// A NumPy `.npz` archive.
    Npz,
    /// A Flax msgpack file (`flax_model.msgpack`).
    FlaxMsgpack,
    Other(i32),
}

impl Format {
    pub(crate) fn from_raw(raw: sys::ckpt_format) -> Format {
        match raw {
            sys::CKPT_FORMAT_SAFETENSORS => Format::Safetensors,
            sys::CKPT_FORMAT_SAFETENSORS_SHARDED => Format::SafetensorsSharded,
            sys::CKPT_FORMAT_TORCH => Format::Torch,
            sys::CKPT_FORMAT_TORCH_SHARDED => Format::TorchSharded,
            sys::CKPT_FORMAT_GGUF => Format::Gguf,
            sys::CKPT_FORMAT_DCP => Format::Dcp,
            sys::CKPT_FORMAT_NPY => Format::Npy,
            sys::CKPT_FORMAT_NPZ => Format::Npz,
            sys::CKPT_FORMAT_FLAX_MSGPACK => Format::FlaxMsgpack,
            other => Format::Other(other),
        }
    }

    /// The format libckpt names so ("gguf", "flax-msgpack"; case ignored),
    /// or None (`ckpt_format_from_name`).
    pub fn from_name(name: &str) -> Option<Format> {
        let c = std::ffi::CString::new(name).ok()?;
        match unsafe { sys::ckpt_format_from_name(c.as_ptr()) } {
            0 => None,
            raw => Some(Format::from_raw(raw)),
        }
    }

    /// The format libckpt writes for a file name's suffix (".safetensors",
    /// ".gguf", ".pt"/".pth"/".bin", ".npy", ".npz", ".msgpack"), or None
    /// (`ckpt_format_for_path`).
    pub fn for_path<P: AsRef<Path>>(path: P) -> Option<Format> {
        let c = cpath(path.as_ref()).ok()?;
        match unsafe { sys::ckpt_format_for_path(c.as_ptr()) } {
            0 => None,
            raw => Some(Format::from_raw(raw)),
        }
    }

    pub(crate) fn raw(self) -> sys::ckpt_format {
        match self {
            Format::Safetensors => sys::CKPT_FORMAT_SAFETENSORS,
            Format::SafetensorsSharded => sys::CKPT_FORMAT_SAFETENSORS_SHARDED,
            Format::Torch => sys::CKPT_FORMAT_TORCH,
            Format::TorchSharded => sys::CKPT_FORMAT_TORCH_SHARDED,
            Format::Gguf => sys::CKPT_FORMAT_GGUF,
            Format::Dcp => sys::CKPT_FORMAT_DCP,
            Format::Npy => sys::CKPT_FORMAT_NPY,
            Format::Npz => sys::CKPT_FORMAT_NPZ,
            Format::FlaxMsgpack => sys::CKPT_FORMAT_FLAX_MSGPACK,
            Format::Other(n) => n,
        }
    }

    /// libckpt's short name: "safetensors", "safetensors-sharded", "torch", …
    pub fn name(self) -> &'static str {
        unsafe { str_at(sys::ckpt_format_name(self.raw())) }.unwrap_or("?")
    }
}

/// How a catalog reads its local files (`ckpt_io_mode`), for every load,
/// conversion and verification of it: the one direct-I/O knob.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IoMode {
    /// Through the page cache (views allowed); a load reads a local file
    /// of 64 MiB or more that is mostly not cached with O_DIRECT.
    #[default]
    Auto,
    /// Always through the page cache.
    Buffered,
    /// O_DIRECT where the file system allows it, around the page cache: no
    /// mappings, so loads read every tensor into memory (no views).
    Direct,
}

/// Options of [`Catalog::open_with`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Pickle globals ("module.Name") allowed beside torch's weights-only
    /// allowlist (as `torch.serialization.add_safe_globals`); nothing is
    /// ever executed, they are kept in the object tree.
    pub allowed_globals: Vec<String>,
    /// How local files are read.
    pub io: IoMode,
}

/// An opened checkpoint: its tensors' names, dtypes, shapes and places,
/// read from headers only (`ckpt_catalog_open`).  Reads take `&self` and
/// may run from many threads at once; everything borrowed from a catalog
/// (tensors, names, shapes, views) lives as long as it.
pub struct Catalog {
    raw: NonNull<sys::ckpt_catalog>,
    /// The bytes of a catalog opened from memory, and the table's view of
    /// them: dropped after the catalog is closed (fields drop after `drop`).
    _memory: Option<Box<Memory>>,
}

struct Memory {
    _bytes: Box<[u8]>,
    source: sys::ckpt_memory_source,
}

// SAFETY: libckpt documents a catalog as readable from many threads at once
// (views are mapped under a lock); it is only closed by Drop.
unsafe impl Send for Catalog {}
unsafe impl Sync for Catalog {}

impl Drop for Catalog {
    fn drop(&mut self) {
        unsafe { sys::ckpt_catalog_close(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Catalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Catalog")
            .field("format", &self.format())
            .field("tensors", &self.len())
            .field("files", &self.file_count())
            .finish()
    }
}

pub(crate) unsafe fn str_at<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        None
    } else {
        CStr::from_ptr(p).to_str().ok()
    }
}

pub(crate) unsafe fn path_at(p: *const c_char) -> Option<PathBuf> {
    if p.is_null() {
        None
    } else {
        Some(PathBuf::from(OsStr::from_bytes(CStr::from_ptr(p).to_bytes())))
    }
}

impl Catalog {
    /// Opens a checkpoint: a `.safetensors` file, a `*.index.json`, a torch
    /// `.bin`/`.pt` file, or a directory holding one (see `ckpt_catalog_open`).
    /// Every header is validated; no tensor data is read.
    pub fn open<P: AsRef<Path>>(path: P) -> Result<Catalog> {
        let c = cpath(path.as_ref())?;
        let err = RawError::new();
        let mut out = ptr::null_mut();
        err.check(unsafe { sys::ckpt_catalog_open(c.as_ptr(), &mut out, err.ptr()) })?;
        Ok(Catalog { raw: NonNull::new(out).expect("ckpt_catalog_open succeeded without a catalog"), _memory: None })
    }

    /// [`open`](Self::open) with options (`ckpt_catalog_open_ex`).
    pub fn open_with<P: AsRef<Path>>(path: P, options: &OpenOptions) -> Result<Catalog> {
        let c = cpath(path.as_ref())?;
        let globals: Vec<std::ffi::CString> =
            options.allowed_globals.iter().map(|g| cstring(g, "allowed global")).collect::<Result<_>>()?;
        let ptrs: Vec<*const c_char> = globals.iter().map(|g| g.as_ptr()).collect();
        // SAFETY: zeroed storage for ckpt_catalog_options_init_sized to fill.
        let mut o = Box::new(unsafe { sys::Reserved::<sys::ckpt_catalog_options>::zeroed() });
        unsafe { sys::ckpt_catalog_options_init_sized(&mut o.value, std::mem::size_of::<sys::ckpt_catalog_options>()) };
        o.value.allowed_globals = if ptrs.is_empty() { ptr::null() } else { ptrs.as_ptr() };
        o.value.allowed_global_count = ptrs.len();
        o.value.io = match options.io {
            IoMode::Auto => sys::CKPT_IO_AUTO,
            IoMode::Buffered => sys::CKPT_IO_BUFFERED,
            IoMode::Direct => sys::CKPT_IO_DIRECT,
        };
        let err = RawError::new();
        let mut out = ptr::null_mut();
        err.check(unsafe { sys::ckpt_catalog_open_ex(c.as_ptr(), &o.value, &mut out, err.ptr()) })?;
        Ok(Catalog { raw: NonNull::new(out).expect("ckpt_catalog_open_ex succeeded without a catalog"), _memory: None })
    }

    /// Opens a checkpoint file held in memory (the library's memory source,
    /// `ckpt_catalog_open_source`): `name` says what it is by its suffix, as
    /// a path would (`"model.safetensors"`, `"x.gguf"`, `"w.pt"`). The
    /// catalog keeps the bytes; views point into them.
    pub fn from_bytes(name: &str, bytes: impl Into<Box<[u8]>>) -> Result<Catalog> {
        let name = cstring(name, "name")?;
        let bytes: Box<[u8]> = bytes.into();
        let mut memory = Box::new(Memory {
            source: sys::ckpt_memory_source { data: bytes.as_ptr().cast(), size: bytes.len() as u64 },
            _bytes: bytes,
        });
        let err = RawError::new();
        let mut out = ptr::null_mut();
        let user: *mut sys::ckpt_memory_source = &mut memory.source;
        err.check(unsafe {
            sys::ckpt_catalog_open_source(
                &sys::ckpt_memory_source_ops,
                user.cast(),
                name.as_ptr(),
                ptr::null(),
                &mut out,
                err.ptr(),
            )
        })?;
        Ok(Catalog {
            raw: NonNull::new(out).expect("ckpt_catalog_open_source succeeded without a catalog"),
            _memory: Some(memory),
        })
    }

    pub(crate) fn raw(&self) -> *mut sys::ckpt_catalog {
        self.raw.as_ptr()
    }

    pub fn format(&self) -> Format {
        Format::from_raw(unsafe { sys::ckpt_catalog_format(self.raw()) })
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        unsafe { sys::ckpt_catalog_tensor_count(self.raw()) }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Total bytes of tensor data (tensors sharing a torch storage count once each).
    pub fn nbytes(&self) -> u64 {
        self.tensors().map(|t| t.nbytes()).sum()
    }

    /// The tensors, shard by shard, in the order of their data.
    pub fn tensors(&self) -> Tensors<'_> {
        Tensors { catalog: self, next: 0, end: self.len() }
    }

    /// The i-th tensor.
    pub fn tensor(&self, i: usize) -> Option<Tensor<'_>> {
        let p = unsafe { sys::ckpt_catalog_tensor(self.raw(), i) };
        unsafe { p.as_ref() }.map(|info| Tensor { catalog: self, info })
    }

    /// The tensor with this exact name.
    pub fn get(&self, name: &str) -> Option<Tensor<'_>> {
        let c = cstring(name, "tensor name").ok()?;
        let p = unsafe { sys::ckpt_catalog_find(self.raw(), c.as_ptr()) };
        unsafe { p.as_ref() }.map(|info| Tensor { catalog: self, info })
    }

    /// The tensor with this name, or a `NotFound` error naming it.
    pub fn require(&self, name: &str) -> Result<Tensor<'_>> {
        self.get(name).ok_or_else(|| Error::Argument {
            status: crate::Status::NotFound,
            detail: None,
            tensor: Some(name.to_string()),
            message: format!("{} has no tensor '{}'", self.file_path(0).unwrap_or_default().display(), name),
        })
    }

    /// Number of data files (1, or the number of shards).
    pub fn file_count(&self) -> usize {
        unsafe { sys::ckpt_catalog_file_count(self.raw()) }
    }

    /// The i-th data file's path, as opened.
    pub fn file_path(&self, i: usize) -> Option<PathBuf> {
        unsafe { path_at(sys::ckpt_catalog_file_path(self.raw(), i)) }
    }

    /// The i-th data file's size in bytes.
    pub fn file_size(&self, i: usize) -> u64 {
        unsafe { sys::ckpt_catalog_file_size(self.raw(), i) }
    }

    /// The index file of a sharded checkpoint.
    pub fn index_path(&self) -> Option<PathBuf> {
        unsafe { path_at(sys::ckpt_catalog_index_path(self.raw())) }
    }

    /// A torch file's object tree as JSON (non-tensor values, containers);
    /// None for safetensors.  See `ckpt_catalog_tree_json` for the schema.
    pub fn tree_json(&self) -> Option<&str> {
        unsafe { str_at(sys::ckpt_catalog_tree_json(self.raw())) }
    }

    /// The same tree as the library's values (no JSON): walk it with
    /// [`Node::get`].  None for safetensors.
    pub fn tree(&self) -> Option<Node<'_>> {
        // SAFETY: the catalog's values live as long as the catalog.
        unsafe { Node::from_raw(sys::ckpt_catalog_tree(self.raw())) }
    }

    /// The `__metadata__` map (for shards: the union of their maps), in file order.
    pub fn metadata(&self) -> Vec<(&str, &str)> {
        let n = unsafe { sys::ckpt_catalog_metadata_count(self.raw()) };
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let (mut k, mut v) = (ptr::null(), ptr::null());
            if unsafe { sys::ckpt_catalog_metadata_entry(self.raw(), i, &mut k, &mut v) } == sys::CKPT_OK {
                if let (Some(k), Some(v)) = unsafe { (str_at(k), str_at(v)) } {
                    out.push((k, v));
                }
            }
        }
        out
    }

    /// One `__metadata__` value.
    pub fn metadata_get(&self, key: &str) -> Option<&str> {
        let c = cstring(key, "metadata key").ok()?;
        unsafe { str_at(sys::ckpt_catalog_metadata_get(self.raw(), c.as_ptr())) }
    }

    /// One `__metadata__` value of data file `file` alone.
    pub fn file_metadata(&self, file: usize, key: &str) -> Option<&str> {
        let c = cstring(key, "metadata key").ok()?;
        unsafe { str_at(sys::ckpt_catalog_file_metadata(self.raw(), file, c.as_ptr())) }
    }

    /// A plan over this catalog: every tensor, unchanged, until rules are added.
    pub fn plan<'b>(&self) -> Result<Plan<'_, 'b>> {
        Plan::new(self)
    }

    /// Writes every tensor into a new checkpoint (one file, or shards per
    /// `options`), streamed with memory independent of the size.
    pub fn convert<P: AsRef<Path>>(&self, dst: P, options: &WriterOptions) -> Result<()> {
        self.convert_with_progress(dst, options, |_, _| true)
    }

    /// [`convert`](Self::convert) with a callback `(done, total) -> keep going`;
    /// returning false cancels (`Status::Cancelled`, nothing left behind).
    pub fn convert_with_progress<P, F>(&self, dst: P, options: &WriterOptions, progress: F) -> Result<()>
    where
        P: AsRef<Path>,
        F: FnMut(u64, u64) -> bool,
    {
        self.plan()?.convert_with_progress(dst, options, progress)
    }

    /// Re-reads every tensor that has a recorded checksum and compares;
    /// returns how many matched (ckpt's XXH3-64 digests).
    pub fn verify(&self) -> Result<usize> {
        Ok(self.verify_report()?.tensor_digests)
    }

    /// [`verify`](Self::verify), saying everything it checked (`ckpt_verify`'s
    /// report, what `ckpt verify --json` prints as "checksums").
    pub fn verify_report(&self) -> Result<VerifyReport> {
        let err = RawError::new();
        // SAFETY: a plain C struct; zeros are valid, and `size` says how much the library may fill.
        let mut r: sys::ckpt_verify_report = unsafe { std::mem::zeroed() };
        r.size = std::mem::size_of::<sys::ckpt_verify_report>();
        err.check(unsafe { sys::ckpt_verify(self.raw(), ptr::null(), &mut r, err.ptr()) })?;
        Ok(VerifyReport {
            tensor_digests: r.tensor_digests,
            header_digests: r.header_digests,
            zip_crc32: r.zip_crc32,
            bytes: r.bytes,
            tensors: r.tensors,
            file_sha256: r.file_sha256,
            chunk_digests: r.chunk_digests,
        })
    }
}

/// What [`Catalog::verify_report`] checked; zeros when the files record nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Tensors whose XXH3-64 (recorded by a writer with `checksums`) matched.
    pub tensor_digests: usize,
    /// Files whose header XXH3-64 matched.
    pub header_digests: usize,
    /// ZIP members (torch files, `.npz`) whose CRC-32 matched.
    pub zip_crc32: usize,
    /// Bytes those checksums cover, all read.
    pub bytes: u64,
    /// Tensors whose bytes they cover.
    pub tensors: usize,
    /// Files whose SHA-256, as their source states it, matched (an hf://
    /// repo's LFS files, against the Hub's hashes).
    pub file_sha256: usize,
    /// Per-chunk XXH3-64s (tensors of at least 4 MiB, a digest per 1 MiB
    /// chunk, the empty last one included) that matched.
    pub chunk_digests: usize,
}

/// Iterator over a catalog's tensors.
pub struct Tensors<'a> {
    catalog: &'a Catalog,
    next: usize,
    end: usize,
}

impl<'a> Iterator for Tensors<'a> {
    type Item = Tensor<'a>;
    fn next(&mut self) -> Option<Tensor<'a>> {
        if self.next >= self.end {
            return None;
        }
        self.next += 1;
        self.catalog.tensor(self.next - 1)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.end - self.next, Some(self.end - self.next))
    }
}

impl ExactSizeIterator for Tensors<'_> {}

/// One tensor of a catalog, borrowed from it.
#[derive(Clone, Copy)]
pub struct Tensor<'a> {
    catalog: &'a Catalog,
    info: &'a sys::ckpt_tensor_info,
}

impl fmt::Debug for Tensor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("name", &self.name())
            .field("dtype", &self.dtype())
            .field("shape", &self.shape())
            .field("nbytes", &self.nbytes())
            .finish()
    }
}

impl<'a> Tensor<'a> {
    pub(crate) fn from_raw(catalog: &'a Catalog, info: &'a sys::ckpt_tensor_info) -> Tensor<'a> {
        Tensor { catalog, info }
    }

    /// Its name (UTF-8, as libckpt guarantees).
    pub fn name(&self) -> &'a str {
        unsafe { str_at(self.info.name) }.unwrap_or("")
    }

    pub fn dtype(&self) -> Dtype {
        Dtype::from_raw(self.info.dtype)
    }

    /// Sizes, outermost first; empty for a scalar.
    pub fn shape(&self) -> &'a [u64] {
        if self.info.ndim == 0 {
            &[]
        } else {
            unsafe { std::slice::from_raw_parts(self.info.shape, self.info.ndim as usize) }
        }
    }

    pub fn ndim(&self) -> usize {
        self.info.ndim as usize
    }

    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> u64 {
        self.info.numel
    }

    /// Size of its data in bytes.
    pub fn nbytes(&self) -> u64 {
        self.info.nbytes
    }

    /// Index of its data file (see [`Catalog::file_path`]).
    pub fn file(&self) -> usize {
        self.info.file as usize
    }

    /// Absolute byte offset of its data in that file.
    pub fn offset(&self) -> u64 {
        self.info.offset
    }

    /// Element strides of a torch view saved non-contiguous (reads gather it
    /// into dense row-major order).
    pub fn strides(&self) -> Option<&'a [i64]> {
        if self.info.strides.is_null() || self.info.ndim == 0 {
            None
        } else {
            Some(unsafe { std::slice::from_raw_parts(self.info.strides, self.info.ndim as usize) })
        }
    }

    /// Storage number: tensors sharing bytes (tied torch weights) share it.
    pub fn storage(&self) -> u32 {
        self.info.storage
    }

    /// Whether the file stores it big-endian (reads return little-endian).
    pub fn is_big_endian(&self) -> bool {
        self.info.big_endian != 0
    }

    /// Whether it sits in a DEFLATE-compressed zip record (no view).
    pub fn is_compressed(&self) -> bool {
        self.info.compressed != 0
    }

    /// Whether [`view`](Self::view) can map it: dense, little-endian, stored.
    pub fn is_viewable(&self) -> bool {
        self.info.strides.is_null() && !self.is_big_endian() && !self.is_compressed()
    }

    /// The catalog it belongs to.
    pub fn catalog(&self) -> &'a Catalog {
        self.catalog
    }

    /// Reads the whole tensor into `dst`, whose element type must hold its
    /// dtype (`f32` for F32, `u16` for F16/BF16, `i64` for I64, `u8` for
    /// U8/BOOL/F8, …) and whose length must be its element count.
    pub fn read_into<T: Element>(&self, dst: &mut [T]) -> Result<()> {
        check_typed::<T>(self.dtype(), self.numel(), dst.len(), self.name())?;
        self.read_bytes(0, as_bytes_mut(dst))
    }

    /// Reads `dst.len()` bytes of its data, from `byte_offset` bytes into it
    /// (any dtype, packed ones included).
    pub fn read_bytes(&self, byte_offset: u64, dst: &mut [u8]) -> Result<()> {
        let err = RawError::new();
        err.check(unsafe {
            sys::ckpt_catalog_read(
                self.catalog.raw(),
                self.info,
                byte_offset,
                dst.as_mut_ptr() as *mut _,
                dst.len() as u64,
                err.ptr(),
            )
        })
    }

    /// Reads the whole tensor into a new `Vec<T>` (see [`read_into`](Self::read_into)).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        check_typed::<T>(self.dtype(), self.numel(), self.numel() as usize, self.name())?;
        let n = usize::try_from(self.numel())
            .map_err(|_| Error::argument(Some(self.name()), "tensor too large for this machine".into()))?;
        let mut v: Vec<T> = Vec::with_capacity(n);
        // SAFETY: the capacity holds n elements; read_bytes fills every byte
        // of them before set_len, and T accepts every bit pattern.
        unsafe {
            let bytes = std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, n * std::mem::size_of::<T>());
            self.read_bytes(0, bytes)?;
            v.set_len(n);
        }
        Ok(v)
    }

    /// A zero-copy, read-only view of its bytes in a mapping of its file,
    /// valid as long as the catalog (the borrow checker sees to it).  Only
    /// for tensors stored as read ([`is_viewable`](Self::is_viewable)).
    ///
    /// The mapping is shared with the file: like any mapped file, the bytes
    /// change if another process rewrites the file in place while it is
    /// open (ckpt's own writers never do; they replace files by renaming).
    ///
    /// ```no_run
    /// let catalog = ckpt::Catalog::open("model.safetensors")?;
    /// let bytes: &[u8] = catalog.require("w")?.view()?;
    /// println!("{}", bytes.len());
    /// drop(catalog); // after the last use of `bytes`
    /// # Ok::<(), ckpt::Error>(())
    /// ```
    ///
    /// A view cannot outlive its catalog; this does not compile:
    ///
    /// ```compile_fail
    /// let catalog = ckpt::Catalog::open("model.safetensors")?;
    /// let bytes: &[u8] = catalog.require("w")?.view()?;
    /// drop(catalog); // error[E0505]: cannot move out of `catalog` because it is borrowed
    /// println!("{}", bytes.len());
    /// # Ok::<(), ckpt::Error>(())
    /// ```
    ///
    /// nor does this:
    ///
    /// ```compile_fail
    /// let bytes: &[u8] = {
    ///     let catalog = ckpt::Catalog::open("model.safetensors").unwrap();
    ///     catalog.get("w").unwrap().view().unwrap() // error[E0597]: `catalog` does not live long enough
    /// };
    /// println!("{}", bytes.len());
    /// ```
    pub fn view(&self) -> Result<&'a [u8]> {
        let err = RawError::new();
        let mut data: *const std::ffi::c_void = ptr::null();
        err.check(unsafe { sys::ckpt_catalog_view(self.catalog.raw(), self.info, &mut data, err.ptr()) })?;
        let n = self.nbytes() as usize;
        if n == 0 {
            return Ok(&[]);
        }
        // SAFETY: libckpt maps the whole file read-only; the range is the
        // tensor's, validated at open, and lives until ckpt_catalog_close.
        Ok(unsafe { std::slice::from_raw_parts(data as *const u8, n) })
    }

    /// A zero-copy typed view (see [`view`](Self::view)); fails when the
    /// element type does not hold the dtype or the data is not aligned for it.
    pub fn view_as<T: Element>(&self) -> Result<&'a [T]> {
        check_typed::<T>(self.dtype(), self.numel(), self.numel() as usize, self.name())?;
        let bytes = self.view()?;
        if bytes.is_empty() {
            return Ok(&[]);
        }
        if (bytes.as_ptr() as usize) % std::mem::align_of::<T>() != 0 {
            return Err(Error::argument(
                Some(self.name()),
                format!(
                    "tensor '{}' sits at file offset {}, not aligned for {}: read it instead",
                    self.name(),
                    self.offset(),
                    T::NAME
                ),
            ));
        }
        // SAFETY: aligned, the right length, and T accepts every bit pattern.
        Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const T, bytes.len() / std::mem::size_of::<T>()) })
    }
}
