//! The Rust binding against files written by torch, safetensors and
//! huggingface_hub, and its output read back by safetensors.
mod common;

use std::fs;
use std::path::{Path, PathBuf};

use ckpt::{
    Catalog, Detail, Dtype, Element, Error, Expected, Format, LoadOptions, Mismatch, Status, TensorData, Value, Writer, WriterOptions,
};
use common::*;

fn bytes_of<T: Element>(v: &[T]) -> Vec<u8> {
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }.to_vec()
}

/// Reads a tensor through the typed API, with the element type its dtype calls for.
fn typed_bytes(t: &ckpt::Tensor) -> Vec<u8> {
    match t.dtype() {
        Dtype::F32 => bytes_of(&t.to_vec::<f32>().unwrap()),
        Dtype::F64 => bytes_of(&t.to_vec::<f64>().unwrap()),
        Dtype::F16 | Dtype::BF16 | Dtype::U16 => bytes_of(&t.to_vec::<u16>().unwrap()),
        Dtype::I64 => bytes_of(&t.to_vec::<i64>().unwrap()),
        Dtype::I32 => bytes_of(&t.to_vec::<i32>().unwrap()),
        Dtype::I16 => bytes_of(&t.to_vec::<i16>().unwrap()),
        Dtype::I8 => bytes_of(&t.to_vec::<i8>().unwrap()),
        Dtype::U32 => bytes_of(&t.to_vec::<u32>().unwrap()),
        Dtype::U64 => bytes_of(&t.to_vec::<u64>().unwrap()),
        Dtype::C64 => bytes_of(&t.to_vec::<[f32; 2]>().unwrap()),
        Dtype::U8 | Dtype::Bool | Dtype::F8E4M3 | Dtype::F8E5M2 => t.to_vec::<u8>().unwrap(),
        d => panic!("no typed read for {}", d),
    }
}

fn check_file(file: &str, format: Format) {
    let fx = fixtures();
    let cat = Catalog::open(fx.path(file)).unwrap();
    assert_eq!(cat.format(), format);
    let want: Vec<_> = fx.tensors_of(file).collect();
    assert_eq!(cat.len(), want.len());
    for e in &want {
        let t = cat.require(&e.name).unwrap();
        assert_eq!(t.name(), e.name);
        assert_eq!(t.dtype().name(), e.dtype, "{}", e.name);
        assert_eq!(t.shape(), &e.shape[..], "{}", e.name);
        assert_eq!(t.nbytes() as usize, e.bytes.len());
        assert_eq!(typed_bytes(&t), e.bytes, "{} read", e.name);
        if t.is_viewable() {
            assert_eq!(t.view().unwrap(), &e.bytes[..], "{} view", e.name);
        }
        let mut part = vec![0u8; e.bytes.len() / 2];
        t.read_bytes((e.bytes.len() / 4) as u64, &mut part).unwrap();
        assert_eq!(part, e.bytes[e.bytes.len() / 4..e.bytes.len() / 4 + part.len()]);
    }
    for (f, k, v) in fx.meta.iter().filter(|m| m.0 == file) {
        assert_eq!(cat.metadata_get(k), Some(v.as_str()), "{} metadata {}", f, k);
    }
}

#[test]
fn reads_every_dtype_written_by_safetensors() {
    check_file("dtypes.safetensors", Format::Safetensors);
    let fx = fixtures();
    let cat = Catalog::open(fx.path("dtypes.safetensors")).unwrap();
    assert_eq!(cat.metadata(), vec![("format", "pt")]);
    let scalar = cat.require("scalar").unwrap();
    assert_eq!((scalar.ndim(), scalar.numel()), (0, 1));
    assert_eq!(scalar.to_vec::<f32>().unwrap(), vec![2.5]);
    assert_eq!(cat.require("empty").unwrap().to_vec::<f32>().unwrap(), Vec::<f32>::new());
    assert_eq!(cat.require("i64").unwrap().to_vec::<i64>().unwrap(), vec![-5, 0, 7, 1 << 40]);
    assert_eq!(cat.require("bool").unwrap().to_vec::<u8>().unwrap(), vec![1, 0, 1, 1, 0]);
    let f32s = cat.require("ünï.weight").unwrap();
    assert_eq!(f32s.view_as::<f32>().unwrap(), &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let mut into = [0f32; 6];
    f32s.read_into(&mut into).unwrap();
    assert_eq!(into, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(cat.require("c64").unwrap().to_vec::<[f32; 2]>().unwrap(), vec![[1.0, 2.0], [-3.5, 0.25]]);
    assert!(cat.tree_json().is_none());
    assert_eq!(cat.file_count(), 1);
    assert_eq!(cat.file_size(0), fs::metadata(fx.path("dtypes.safetensors")).unwrap().len());
}

#[test]
fn reads_huggingface_hub_shards() {
    check_file("sharded", Format::SafetensorsSharded);
    let fx = fixtures();
    let cat = Catalog::open(fx.path("sharded")).unwrap();
    assert_eq!(cat.file_count(), 3);
    assert!(cat.index_path().unwrap().ends_with("model.safetensors.index.json"));
    assert!(cat.file_path(2).unwrap().ends_with("model-00003-of-00003.safetensors"));
}

#[test]
fn reads_torch_files_views_and_tied_weights() {
    check_file("resnet.pt", Format::Torch);
    check_file("views.pt", Format::Torch);
    let fx = fixtures();
    let cat = Catalog::open(fx.path("views.pt")).unwrap();
    let t = cat.require("t").unwrap();
    assert_eq!(t.strides(), Some(&[1i64, 4][..]));
    assert!(!t.is_viewable());
    let e = t.view().unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert_eq!(e.tensor(), Some("t"));
    assert_eq!(t.to_vec::<f32>().unwrap(), le_f32(&fx.expected("views_t").bytes));
    let (base, tied) = (cat.require("base").unwrap(), cat.require("tied").unwrap());
    assert_eq!(base.storage(), tied.storage());
    assert_eq!(base.storage(), t.storage());
    let train = Catalog::open(fx.path("train.pt")).unwrap();
    let tree = train.tree_json().unwrap();
    assert!(tree.contains("\"epoch\", 3") || tree.contains("\"epoch\",3"), "{}", tree);
    assert!(tree.contains("{\"__tensor__\": \"model.w\"}") || tree.contains("{\"__tensor__\":\"model.w\"}"), "{}", tree);
}

/// The pairs of a plain dict.
fn dict(node: Option<ckpt::Node<'_>>) -> ckpt::Pairs<'_> {
    match node.map(|n| n.get()) {
        Some(Value::Dict { pairs, class: None, state: None }) => pairs,
        other => panic!("not a dict: {:?}", other),
    }
}

/// The dict at `key` of a dict's pairs.
fn pairs_at<'a>(pairs: ckpt::Pairs<'a>, key: &str) -> ckpt::Pairs<'a> {
    dict(pairs.find(key))
}

#[test]
fn object_trees_read_as_values_without_json() {
    let fx = fixtures();
    let train = Catalog::open(fx.path("train.pt")).unwrap();
    let root = dict(train.tree());
    let keys: Vec<_> = root.iter().map(|(k, _)| k.get()).collect();
    assert_eq!(keys, [Value::Str("model"), Value::Str("epoch"), Value::Str("opt"), Value::Str("name")]);
    assert_eq!(pairs_at(root, "model").find("w").unwrap().get(), Value::Tensor("model.w"));
    assert_eq!(root.find("epoch").unwrap().get(), Value::Int(3));
    assert_eq!(root.find("name").unwrap().get(), Value::Str("run"));
    let opt = pairs_at(root, "opt");
    assert_eq!(opt.find("lr").unwrap().get(), Value::Float(0.1));
    let items = match opt.find("betas").unwrap().get() {
        Value::Tuple { class: None, items } => items,
        other => panic!("betas: {:?}", other),
    };
    let betas: Vec<_> = items.iter().map(|n| n.get()).collect();
    assert_eq!(betas, [Value::Float(0.9), Value::Float(0.999)]);
    assert!(items.get(2).is_none() && root.get(4).is_none());
    assert!(Catalog::open(fx.path("dtypes.safetensors")).unwrap().tree().is_none());

    // The plan's tree: the output's names, what it drops taken out.
    let mut plan = train.plan().unwrap();
    plan.rename("model.", "net.").unwrap();
    assert_eq!(pairs_at(dict(plan.tree().unwrap()), "model").find("w").unwrap().get(), Value::Tensor("net.w"));
    plan.exclude("*").unwrap();
    assert!(dict(plan.tree().unwrap()).find("model").is_none());
}

#[test]
fn loads_a_torch_resnet_into_typed_vecs() {
    let fx = fixtures();
    let cat = Catalog::open(fx.path("resnet.pt")).unwrap();
    let loaded = cat.plan().unwrap().load_vecs(&LoadOptions::default()).unwrap();
    let want: Vec<_> = fx.tensors_of("resnet.pt").collect();
    assert_eq!(loaded.len(), want.len());
    let mut counts = (0, 0);
    for (l, e) in loaded.iter().zip(want.iter().copied()) {
        let e = if l.name == e.name { e } else { fx.tensor("resnet.pt", &l.name) };
        assert_eq!((l.dtype.name(), &l.shape), (e.dtype.as_str(), &e.shape));
        assert_eq!(l.data.as_bytes(), &e.bytes[..], "{}", l.name);
        match &l.data {
            TensorData::F32(v) => {
                counts.0 += 1;
                assert_eq!(v.len() as u64, l.shape.iter().product::<u64>());
            }
            TensorData::I64(v) => {
                counts.1 += 1;
                assert!(l.name.ends_with("num_batches_tracked") && l.shape.is_empty() && v.len() == 1 && v[0] >= 1000);
            }
            other => panic!("{}: {:?}", l.name, other.dtype()),
        }
    }
    assert!(counts.0 > 50 && counts.1 > 10, "{:?}", counts);
    let fc = loaded.into_iter().find(|l| l.name == "fc.weight").unwrap();
    let v: Vec<f32> = fc.data.into_vec().unwrap();
    assert_eq!(v, le_f32(&fx.tensor("resnet.pt", "fc.weight").bytes));
}

#[test]
fn plans_transform_as_torch_does() {
    let fx = fixtures();
    let st = Catalog::open(fx.path("dtypes.safetensors")).unwrap();
    // Caller buffers outlive the plan that fills them: declared first.
    let (mut a, mut b) = (vec![0u16; 12], vec![0f32; 6]);
    let mut plan = st.plan().unwrap();
    plan.select("bf16").unwrap().select("f32").unwrap().cast("bf16", Dtype::F32).unwrap().cast("f32", Dtype::BF16).unwrap();
    plan.rename("bf16", "as_f32").unwrap().rename("f32", "as_bf16").unwrap();
    let names: Vec<String> = plan.items().map(|i| i.name().to_string()).collect();
    assert_eq!(names, vec!["as_bf16", "as_f32"]);
    let (ia, _) = plan.find("as_bf16").unwrap();
    let (ib, ib_item) = plan.find("as_f32").unwrap();
    assert!(ib_item.needs_transform());
    plan.set_buffer(ia, &mut a).unwrap();
    plan.set_buffer(ib, &mut b).unwrap();
    assert_eq!(plan.select("*").unwrap_err().status(), Status::BadState);
    let stats = plan.load(&LoadOptions::default()).unwrap();
    assert_eq!(stats.bytes_needed, 48 + 12);
    assert_eq!(plan.data(ib).unwrap(), &fx.expected("cast_bf16_f32").bytes[..]);
    drop(plan);
    assert_eq!(bytes_of(&a), fx.expected("cast_f32_bf16").bytes);
    assert_eq!(bytes_of(&b), fx.expected("cast_bf16_f32").bytes);

    let rn = Catalog::open(fx.path("resnet.pt")).unwrap();
    let cases: Vec<(&str, Box<dyn Fn(&mut ckpt::Plan) -> ckpt::Result<()>>, &str)> = vec![
        ("transpose_fc", Box::new(|p| p.select("fc.weight")?.transpose("*").map(|_| ())), "fc.weight"),
        ("layout_conv1_hwio", Box::new(|p| p.select("conv1.weight")?.layout("*", "OIHW", "HWIO").map(|_| ())), "conv1.weight"),
        ("layout_conv1_hwio", Box::new(|p| p.select("conv1.weight")?.permute("*", &[2, 3, 1, 0]).map(|_| ())), "conv1.weight"),
        ("split_fc_1_of_3", Box::new(|p| p.select("fc.weight")?.split("*", 0, 1, 3).map(|_| ())), "fc.weight"),
        ("slice_fc_cols_2_5", Box::new(|p| p.select("fc.weight")?.slice("*", -1, 2..5).map(|_| ())), "fc.weight"),
    ];
    for (case, rules, name) in cases {
        let want = fx.expected(case);
        let mut plan = rn.plan().unwrap();
        rules(&mut plan).unwrap();
        let loaded = plan.load_vecs(&LoadOptions::default()).unwrap();
        assert_eq!(loaded.len(), 1, "{}", case);
        assert_eq!((loaded[0].name.as_str(), &loaded[0].shape), (name, &want.shape), "{}", case);
        assert_eq!(loaded[0].data.as_slice::<f32>().map(bytes_of), Some(want.bytes.clone()), "{}", case);
    }
    let mut plan = rn.plan().unwrap();
    plan.select("layer*").unwrap().exclude("*num_batches_tracked").unwrap().rename("layer1.", "stage1.").unwrap();
    assert!(plan.items().all(|i| i.name().starts_with("stage1.") || i.name().starts_with("layer")));
    assert!(plan.find("stage1.0.conv1.weight").is_some());
    assert!(plan.items().all(|i| !i.name().ends_with("num_batches_tracked")));
    let e = plan.slice("*", 0, 0..100000).unwrap_err();
    assert!(matches!(e.status(), Status::OutOfRange | Status::InvalidArgument), "{:?}", e);
    assert!(e.tensor().is_some(), "{:?}", e);
}

#[test]
fn views_and_library_buffers_through_load_options() {
    let fx = fixtures();
    let cat = Catalog::open(fx.path("dtypes.safetensors")).unwrap();
    let mut plan = cat.plan().unwrap();
    plan.select("f32").unwrap().select("bf16").unwrap().cast("bf16", Dtype::F32).unwrap();
    let opts = LoadOptions { views: true, threads: 2, ..Default::default() };
    assert!(plan.data(0).is_none());
    plan.load(&opts).unwrap();
    let (i_view, v) = plan.find("f32").unwrap();
    assert!(v.is_view());
    assert_eq!(plan.data(i_view).unwrap(), &fx.tensor("dtypes.safetensors", "f32").bytes[..]);
    let (i_cast, c) = plan.find("bf16").unwrap();
    assert!(!c.is_view());
    assert!(plan.take(i_view).is_none());
    let buf = plan.take(i_cast).unwrap();
    assert_eq!(&buf[..], &fx.expected("cast_bf16_f32").bytes[..]);
    assert_eq!(buf.as_slice_of::<f32>().unwrap(), &le_f32(&fx.expected("cast_bf16_f32").bytes)[..]);
    assert!(plan.data(i_cast).is_none(), "taken buffers are no longer the plan's");
    drop(plan);
    assert_eq!(buf.len(), 24);
}

#[test]
fn direct_io_is_the_catalogs_and_turns_views_off() {
    let fx = fixtures();
    for io in [ckpt::IoMode::Buffered, ckpt::IoMode::Direct] {
        let cat = Catalog::open_with(fx.path("dtypes.safetensors"), &ckpt::OpenOptions { io, ..Default::default() }).unwrap();
        let mut plan = cat.plan().unwrap();
        plan.select("f32").unwrap();
        let stats = plan.load(&LoadOptions { views: true, ..Default::default() }).unwrap();
        let (i, item) = plan.find("f32").unwrap();
        assert_eq!(item.is_view(), io != ckpt::IoMode::Direct, "{:?}: no mappings in direct mode", io);
        assert_eq!(stats.views, u64::from(io != ckpt::IoMode::Direct));
        assert_eq!(plan.data(i).unwrap(), &fx.tensor("dtypes.safetensors", "f32").bytes[..]);
    }
}

#[test]
fn typed_slices_must_fit_the_tensor() {
    let fx = fixtures();
    let cat = Catalog::open(fx.path("dtypes.safetensors")).unwrap();
    let t = cat.require("f32").unwrap();
    let mut wrong_type = vec![0u16; 12];
    let e = t.read_into(&mut wrong_type).unwrap_err();
    assert!(matches!(e, Error::Argument { .. }));
    assert_eq!((e.status(), e.tensor()), (Status::InvalidArgument, Some("f32")));
    assert!(e.to_string().contains("F32") && e.to_string().contains("u16"), "{}", e);
    let mut short = vec![0f32; 11];
    assert_eq!(t.read_into(&mut short).unwrap_err().status(), Status::InvalidArgument);
    assert!(cat.require("bf16").unwrap().to_vec::<f32>().is_err());
    assert_eq!(cat.require("nope").unwrap_err().status(), Status::NotFound);
    let mut past = vec![0u8; 8];
    let e = t.read_bytes(44, &mut past).unwrap_err();
    assert_eq!(e.status(), Status::OutOfRange);
    let mut buf = vec![0f64; 12];
    let mut plan = cat.plan().unwrap();
    plan.select("f32").unwrap();
    assert_eq!(plan.set_buffer(0, &mut buf).unwrap_err().status(), Status::InvalidArgument);
}

#[test]
fn hostile_files_are_refused_with_their_status_and_place() {
    let corpus = hostile();
    assert!(corpus.len() >= 50, "{}", corpus.len());
    for (path, status) in corpus {
        let e = Catalog::open(&path).unwrap_err();
        // The manifest's "CKPT_E_CORRUPT/CKPT_D_DATA_HOLE": the status and the detail.
        let shown = match e.detail() {
            Some(d) => format!("{}/{}", e.status().name(), d.name()),
            None => e.status().name().to_string(),
        };
        assert_eq!(shown, status, "{}: {}", path.display(), e);
        assert!(matches!(e, Error::Library { .. }));
        let named = e.path().map(|p| p.starts_with(path.parent().unwrap())).unwrap_or(false);
        assert!(named, "{}: error names no file: {}", path.display(), e);
        assert!(!e.message().is_empty());
    }
    let e = Catalog::open("/nonexistent/model.safetensors").unwrap_err();
    assert_eq!(e.status(), Status::NotFound);
    let io: std::io::Error = e.into();
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    let hole = Catalog::open(repo().join("tests/hostile/corpus/st-hole.safetensors")).unwrap_err();
    assert_eq!(hole.status(), Status::Corrupt);
    assert_eq!(hole.detail().map(|d| d.name()), Some("CKPT_D_DATA_HOLE"));
    assert_eq!(hole.detail().map(|d| d.code()), Some(ckpt::sys::CKPT_D_DATA_HOLE));
    assert!(hole.to_string().ends_with("[CKPT_E_CORRUPT/CKPT_D_DATA_HOLE]"), "{}", hole);
    assert!(hole.offset().is_some() && hole.tensor().is_some(), "{:?}", hole);
}

#[test]
fn a_file_cut_after_opening_fails_with_truncated() {
    let fx = fixtures();
    let dir = scratch("truncated");
    let path = dir.join("cut.safetensors");
    fs::copy(fx.path("dtypes.safetensors"), &path).unwrap();
    let cat = Catalog::open(&path).unwrap();
    let t = cat.tensors().filter(|t| t.nbytes() > 1).max_by_key(|t| t.offset()).unwrap();
    fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(t.offset() + 1).unwrap();
    let mut bytes = vec![0u8; t.nbytes() as usize];
    let e = t.read_bytes(0, &mut bytes).unwrap_err();
    assert_eq!(e.status(), Status::Truncated, "{}", e);
    assert_eq!(e.path(), Some(path.as_path()));
    // libckpt names the file and the byte where it ends (not yet the tensor).
    assert_eq!(e.offset(), Some(t.offset() + 1), "{:?}", e);
    assert_eq!(t.view().unwrap_err().status(), Status::Truncated);
}

#[test]
fn a_catalog_is_read_from_many_threads() {
    let fx = fixtures();
    let cat = Catalog::open(fx.path("resnet.pt")).unwrap();
    let n = cat.len();
    std::thread::scope(|s| {
        for k in 0..4 {
            let cat = &cat;
            let fx = &fx;
            s.spawn(move || {
                for t in cat.tensors().skip(k).step_by(4) {
                    assert_eq!(typed_bytes(&t), fx.tensor("resnet.pt", t.name()).bytes);
                }
            });
        }
    });
    assert_eq!(cat.tensors().len(), n);
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    bytes_of(v)
}

#[test]
fn writes_what_safetensors_reads_byte_identically() {
    let dir = scratch("writer_single");
    let path = dir.join("out.safetensors");
    let w: Vec<f32> = (0..64).map(|i| i as f32 * 0.5 - 3.0).collect();
    let ids: Vec<i64> = vec![1, -2, 1 << 50];
    let half: Vec<u16> = (0..10u16).map(|i| 0x3c00 + i).collect();
    let mut writer = Writer::create(&path, &WriterOptions { no_sync: true, ..Default::default() }).unwrap();
    writer.set_metadata("format", "pt").unwrap();
    let iw = writer.add_tensor("layer.weight", Dtype::F32, &[8, 8]).unwrap();
    let ii = writer.add_tensor("ids", Dtype::I64, &[3]).unwrap();
    let ih = writer.add_tensor("h", Dtype::BF16, &[2, 5]).unwrap();
    let is = writer.add_tensor("s", Dtype::F32, &[]).unwrap();
    let files = writer.begin().unwrap();
    assert_eq!(files, vec![path.clone()]);
    assert!(!path.exists(), "nothing under the final name before commit");
    for chunk in w.chunks(24) {
        writer.write(iw, chunk).unwrap();
    }
    writer.write(ih, &half).unwrap();
    writer.write(ii, &ids).unwrap();
    let e = writer.write(is, &[1u16]).unwrap_err();
    assert_eq!((e.status(), e.tensor()), (Status::InvalidArgument, Some("s")));
    writer.write(is, &[9.25f32]).unwrap();
    assert_eq!(writer.write(is, &[1f32]).unwrap_err().status(), Status::OutOfRange);
    writer.commit().unwrap();
    safetensors_check(
        &path,
        &[
            ("layer.weight", "F32", &[8, 8], f32_bytes(&w)),
            ("ids", "I64", &[3], bytes_of(&ids)),
            ("h", "BF16", &[2, 5], bytes_of(&half)),
            ("s", "F32", &[], f32_bytes(&[9.25])),
        ],
        &[("format", "pt")],
    );
    run_python(&["resave-cmp".as_ref(), path.as_os_str()]);
    let back = Catalog::open(&path).unwrap();
    assert_eq!(back.require("layer.weight").unwrap().to_vec::<f32>().unwrap(), w);
    let e = Writer::create(&path, &WriterOptions::default()).unwrap_err();
    assert_eq!(e.status(), Status::Exists);
}

#[test]
fn writes_shards_that_safetensors_and_the_index_agree_on() {
    let dir = scratch("writer_sharded");
    let out = dir.join("model");
    let opts = WriterOptions { no_sync: true, ..WriterOptions::sharded(ckpt::parse_size("3KB").unwrap()) };
    assert_eq!(ckpt::parse_size("5GB").unwrap(), 5_000_000_000);
    assert_eq!(ckpt::parse_size("2GiB").unwrap(), 2 << 30);
    assert_eq!(ckpt::parse_size("lots").unwrap_err().status(), Status::BadSize);
    let mut w = Writer::create(&out, &opts).unwrap();
    w.set_checkpoint_metadata("step", "1000").unwrap();
    let mut expect = Vec::new();
    let mut ids = Vec::new();
    for i in 0..5 {
        let name = format!("blocks.{}.w", i);
        ids.push((w.add_tensor(&name, Dtype::F32, &[16, 16]).unwrap(), name));
    }
    let files = w.begin().unwrap();
    assert_eq!(files.len(), 3, "greedy packing, 2 + 2 + 1 tensors of 1 KiB in 3 KB: {:?}", files);
    assert_eq!(w.total_bytes(), 5 * 1024);
    for (k, (i, name)) in ids.iter().enumerate().rev() {
        let v: Vec<f32> = (0..256).map(|j| (k * 1000 + j) as f32).collect();
        w.write(*i, &v[..100]).unwrap();
        w.write(*i, &v[100..]).unwrap();
        expect.push((name.clone(), f32_bytes(&v)));
    }
    w.commit().unwrap();
    let specs: Vec<(&str, &str, &[u64], Vec<u8>)> =
        expect.iter().map(|(n, b)| (n.as_str(), "F32", &[16u64, 16][..], b.clone())).collect();
    safetensors_check(&out, &specs, &[("step", "1000")]);
    assert!(out.join("model.safetensors.index.json").exists());
    let cat = Catalog::open(&out).unwrap();
    assert_eq!((cat.format(), cat.file_count()), (Format::SafetensorsSharded, 3));
}

#[test]
fn an_incomplete_or_dropped_writer_leaves_nothing() {
    let dir = scratch("writer_incomplete");
    let path = dir.join("x.safetensors");
    let mut w = Writer::create(&path, &WriterOptions { no_sync: true, ..Default::default() }).unwrap();
    let i = w.add_tensor("a", Dtype::F32, &[4]).unwrap();
    w.begin().unwrap();
    w.write(i, &[1f32, 2.0]).unwrap();
    let e = w.commit().unwrap_err();
    assert_eq!(e.tensor(), Some("a"), "{}", e);
    let mut w = Writer::create(&path, &WriterOptions::default()).unwrap();
    w.add_tensor("a", Dtype::F32, &[4]).unwrap();
    let e = w.add_tensor("a", Dtype::F32, &[4]).unwrap_err();
    assert_eq!((e.status(), e.detail().map(|d| d.name())), (Status::Corrupt, Some("CKPT_D_DUPLICATE_NAME")));
    w.begin().unwrap();
    drop(w);
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "temporaries removed");
    let mut w = Writer::create(&path, &WriterOptions::default()).unwrap();
    assert_eq!(w.write_bytes(0, &[1]).unwrap_err().status(), Status::BadState);
}

#[test]
fn converts_torch_to_safetensors_checked_by_safetensors() {
    let fx = fixtures();
    let dir = scratch("convert");
    let out = dir.join("resnet.safetensors");
    ckpt::convert(fx.path("resnet.pt"), &out, &WriterOptions { no_sync: true, ..Default::default() }).unwrap();
    let specs: Vec<(&str, &str, &[u64], Vec<u8>)> = fx
        .tensors_of("resnet.pt")
        .map(|e| (e.name.as_str(), e.dtype.as_str(), &e.shape[..], e.bytes.clone()))
        .collect();
    safetensors_check(&out, &specs, &[("format", "pt")]);

    // A plan converted: bf16 shards → renamed f32 file.
    let cat = Catalog::open(fx.path("sharded")).unwrap();
    let mut plan = cat.plan().unwrap();
    plan.select("model.layers.1.*").unwrap().rename("model.", "").unwrap().cast("*", Dtype::F32).unwrap();
    let out = dir.join("layer1.safetensors");
    plan.convert(&out, &WriterOptions { no_sync: true, ..Default::default() }).unwrap();
    let src = &fx.tensor("sharded", "model.layers.1.weight").bytes;
    let as_f32: Vec<u8> = src.chunks(2).flat_map(|c| [0, 0, c[0], c[1]]).collect();
    safetensors_check(&out, &[("layers.1.weight", "F32", &[64, 64], as_f32)], &[]);
}

#[test]
fn progress_cancels_and_panics_propagate() {
    let fx = fixtures();
    let cat = Catalog::open(fx.path("resnet.pt")).unwrap();
    let mut seen = Vec::new();
    cat.plan().unwrap().load_with_progress(&LoadOptions::default(), |d, t| {
        seen.push((d, t));
        true
    })
    .unwrap();
    assert_eq!(seen.last().map(|s| s.0 == s.1), Some(true), "{:?}", seen);
    let mut plan = cat.plan().unwrap();
    let e = plan.load_with_progress(&LoadOptions::default(), |_, _| false).unwrap_err();
    assert_eq!(e.status(), Status::Cancelled);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = plan.load_with_progress(&LoadOptions::default(), |_, _| panic!("from the callback"));
    }));
    assert_eq!(r.unwrap_err().downcast_ref::<&str>(), Some(&"from the callback"));
    let dir = scratch("convert_cancel");
    let e = cat.convert_with_progress(dir.join("x.safetensors"), &WriterOptions::default(), |_, _| false).unwrap_err();
    assert_eq!(e.status(), Status::Cancelled);
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
}

#[test]
fn a_checkpoint_in_memory_reads_as_its_file() {
    let fx = fixtures();
    for name in ["resnet.pt"] {
        let bytes = fs::read(fx.path(name)).unwrap();
        let from_file = Catalog::open(fx.path(name)).unwrap();
        let cat = Catalog::from_bytes(name, bytes).unwrap();
        assert_eq!(cat.len(), from_file.len());
        for (a, b) in cat.tensors().zip(from_file.tensors()) {
            assert_eq!((a.name(), a.dtype(), a.shape()), (b.name(), b.dtype(), b.shape()));
            let (mut x, mut y) = (vec![0u8; a.nbytes() as usize], vec![0u8; b.nbytes() as usize]);
            a.read_bytes(0, &mut x).unwrap();
            b.read_bytes(0, &mut y).unwrap();
            assert!(x == y, "{}", a.name());
        }
    }
    // The bytes are checked as a file's: cut short, the open names it.
    let mut bytes = fs::read(fx.path("resnet.pt")).unwrap();
    bytes.truncate(bytes.len() / 2);
    assert!(Catalog::from_bytes("resnet.pt", bytes).is_err());
}

#[test]
fn checksums_are_verified_and_a_flipped_bit_is_found() {
    let dir = scratch("verify");
    let path = dir.join("c.safetensors");
    let mut w = Writer::create(&path, &WriterOptions { checksums: true, no_sync: true, ..Default::default() }).unwrap();
    let i = w.add_tensor("w", Dtype::F32, &[256]).unwrap();
    w.begin().unwrap();
    w.write(i, &vec![1.5f32; 256]).unwrap();
    w.commit().unwrap();
    assert_eq!(Catalog::open(&path).unwrap().verify().unwrap(), 1);
    let r = Catalog::open(&path).unwrap().verify_report().unwrap();
    assert_eq!((r.tensor_digests, r.header_digests, r.zip_crc32, r.bytes, r.tensors, r.file_sha256), (1, 1, 0, 1024, 1, 0), "{:?}", r);
    assert_eq!(r.chunk_digests, 0);
    // A tensor of 5 MiB records a digest per 1 MiB chunk: ceil(5) + 1 of them.
    let chunked = dir.join("chunked.safetensors");
    let mut w = Writer::create(&chunked, &WriterOptions { checksums: true, no_sync: true, ..Default::default() }).unwrap();
    let i = w.add_tensor("big", Dtype::F32, &[5 << 18]).unwrap();
    w.begin().unwrap();
    w.write(i, &vec![0.25f32; 5 << 18]).unwrap();
    w.commit().unwrap();
    let r = Catalog::open(&chunked).unwrap().verify_report().unwrap();
    assert_eq!((r.tensor_digests, r.chunk_digests, r.header_digests), (1, 6, 1), "{:?}", r);
    // A torch file records the CRC-32 of every ZIP member.
    let fx = fixtures();
    let t = Catalog::open(fx.path("resnet.pt")).unwrap().verify_report().unwrap();
    assert!(t.zip_crc32 > 0 && t.tensor_digests == 0 && t.tensors > 0, "{:?}", t);
    let mut bytes = fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 100] ^= 4;
    fs::write(&path, bytes).unwrap();
    let e = Catalog::open(&path).unwrap().verify().unwrap_err();
    assert_eq!((e.status(), e.tensor()), (Status::Checksum, Some("w")));
    assert_eq!(e.detail().map(|d| d.name()), Some("CKPT_D_CHECKSUM"));
}

#[test]
fn a_match_report_compares_with_a_model_skeleton() {
    let fx = fixtures();
    let cat = Catalog::open(fx.path("resnet.pt")).unwrap();
    let mut plan = cat.plan().unwrap();
    plan.select("fc.*").unwrap();
    let expected = vec![
        Expected { name: "fc.weight".into(), dtype: Some(Dtype::F32), shape: vec![10, 128] },
        Expected { name: "fc.bias".into(), dtype: Some(Dtype::F32), shape: vec![11] },
        Expected { name: "head.weight".into(), dtype: None, shape: vec![1] },
    ];
    let report = plan.match_expected(&expected, false, false).unwrap();
    assert!(report.contains(&Mismatch::Missing { name: "head.weight".into(), expected: 2 }), "{:?}", report);
    assert!(report.iter().any(|m| matches!(m, Mismatch::Shape { name, .. } if name == "fc.bias")), "{:?}", report);
    assert_eq!(report.len(), 2);
    let report = plan.match_expected(&expected[..1], false, true).unwrap();
    assert!(report.iter().any(|m| matches!(m, Mismatch::Unexpected { name, .. } if name == "fc.bias")));
    assert_eq!(plan.len(), 1);
}

#[test]
fn the_example_imports_a_resnet_within_its_memory_bound() {
    let fx = fixtures();
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().unwrap().parent().unwrap().join("examples/import_resnet");
    assert!(example.exists(), "{} (cargo test builds examples)", example.display());
    let src = fx.path("resnet.pt");
    let out = std::process::Command::new(&example).arg(&src).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}", text);
    let field = |k: &str| -> u64 {
        let l = text.lines().find(|l| l.starts_with(k)).unwrap_or_else(|| panic!("no {} in {}", k, text));
        l.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let size = fs::metadata(&src).unwrap().len();
    assert_eq!(field("tensors"), fx.tensors_of("resnet.pt").count() as u64);
    let data: u64 = fx.tensors_of("resnet.pt").map(|e| e.bytes.len() as u64).sum();
    assert_eq!(field("bytes"), data);
    assert!(field("peak_rss_bytes") <= size + (64 << 20), "{}", text);
    let bad = std::process::Command::new(&example).arg(Path::new("/nonexistent.pt")).output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("CKPT_E_NOT_FOUND"));
}

#[test]
fn dtypes_and_casts_follow_the_library() {
    assert_eq!("bf16".parse::<Dtype>().unwrap(), Dtype::BF16);
    assert_eq!("F8_E4M3".parse::<Dtype>().unwrap(), Dtype::F8E4M3);
    assert_eq!("float32".parse::<Dtype>().unwrap(), Dtype::F32);
    assert_eq!("f4".parse::<Dtype>().unwrap().bits(), 4);
    let e = "x".parse::<Dtype>().unwrap_err();
    assert_eq!((e.status(), e.detail().map(|d| d.name())), (Status::Unsupported, Some("CKPT_D_UNKNOWN_DTYPE")));
    assert_eq!(Dtype::all().count(), 22);
    assert!(Dtype::all().all(|d| d.name().parse::<Dtype>().unwrap() == d));
    assert!(Dtype::BF16.can_cast_to(Dtype::F32) && !Dtype::F32.can_cast_to(Dtype::I64));
    let src: Vec<u8> = [1.0f32, -2.5].iter().flat_map(|f| f.to_le_bytes()).collect();
    let mut dst = [0u8; 4];
    ckpt::cast(Dtype::F32, &src, Dtype::BF16, &mut dst).unwrap();
    assert_eq!(dst, [0x80, 0x3f, 0x20, 0xc0]);
    assert!(ckpt::cast(Dtype::F32, &src, Dtype::BF16, &mut [0u8; 3]).is_err());
    assert_eq!(Status::Corrupt.code(), 18);
    assert_eq!(Status::from_code(18), Status::Corrupt);
    assert_eq!(Status::from_code(999), Status::Other(999));
    // Every status of the library's table has its variant, by the same name;
    // every detail names its status.
    for &(name, code) in ckpt::sys::CKPT_STATUSES.iter().filter(|s| s.1 != 0) {
        assert_eq!(Status::from_code(code).name(), name);
        assert!(!matches!(Status::from_code(code), Status::Other(_)), "{} has no variant", name);
    }
    for &(name, code, status) in ckpt::sys::CKPT_DETAILS.iter().filter(|d| d.1 != 0) {
        let d = Detail::from_code(code).unwrap();
        assert_eq!((d.name(), d.status().code()), (name, status));
    }
    let large = Detail::from_code(21).unwrap();
    assert_eq!((large.name(), large.status()), ("CKPT_D_HEADER_TOO_LARGE", Status::Corrupt));
    assert!(ckpt::version().starts_with("0."));
    assert_eq!((Format::Safetensors.name(), Format::TorchSharded.name()), ("safetensors", "torch-sharded"));
}

#[test]
fn shared_storages_are_written_once_as_the_hub_does() {
    let dir = scratch("shared");
    let out = dir.join("tied.safetensors");
    let w: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let mut writer = Writer::create(&out, &WriterOptions { no_sync: true, ..Default::default() }).unwrap();
    let whole = ckpt::Storage { id: 7, nbytes: 48, begin: 0, end: 48, contiguous: true };
    let a = writer.add_tensor_shared("embed.weight", Dtype::F32, &[3, 4], &whole).unwrap();
    let b = writer.add_tensor_shared("lm_head.weight", Dtype::F32, &[3, 4], &whole).unwrap();
    writer.begin().unwrap();
    assert_eq!((writer.kept(a), writer.kept(b)), (None, Some("embed.weight".to_string())));
    writer.write(a, &w).unwrap();
    writer.write(b, &w).unwrap();
    writer.commit().unwrap();
    let cat = Catalog::open(&out).unwrap();
    assert_eq!(cat.len(), 1);
    assert_eq!(cat.metadata_get("lm_head.weight"), Some("embed.weight"));
    safetensors_check(&out, &[("embed.weight", "F32", &[3, 4], bytes_of(&w))], &[("lm_head.weight", "embed.weight")]);
}

#[test]
fn pickle_globals_outside_the_allowlist_are_refused_and_open_options_reach_the_library() {
    let fx = fixtures();
    let e = Catalog::open(fx.path("args.pt")).unwrap_err();
    assert_eq!(e.status(), Status::Forbidden, "{}", e);
    assert_eq!(e.detail().map(|d| d.name()), Some("CKPT_D_PICKLE_FORBIDDEN"));
    assert!(e.message().contains("argparse.Namespace") && e.path().is_some() && e.offset().is_some(), "{}", e);
    // The options arrive (size set by ckpt_catalog_options_init, names checked by libckpt).
    let bad = ckpt::OpenOptions { allowed_globals: vec!["nodot".into()], ..Default::default() };
    let e = Catalog::open_with(fx.path("args.pt"), &bad).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("nodot"), "{}", e);
    let nul = ckpt::OpenOptions { allowed_globals: vec!["a.\0b".into()], ..Default::default() };
    assert_eq!(Catalog::open_with(fx.path("args.pt"), &nul).unwrap_err().status(), Status::InvalidArgument);
    let ok = ckpt::OpenOptions { allowed_globals: vec!["collections.OrderedDict".into()], ..Default::default() };
    assert_eq!(Catalog::open_with(fx.path("resnet.pt"), &ok).unwrap().len(), fx.tensors_of("resnet.pt").count());
}

#[test]
fn every_status_the_library_names_has_a_variant() {
    // A status the C library knows but this binding leaves as Other(code)
    // would reach users as a bare number: name them all.
    for code in 1..256 {
        let s = Status::from_code(code);
        let known = s.name() != "CKPT_E_UNKNOWN_STATUS";
        assert_eq!(known, !matches!(s, Status::Other(_)), "status {} ({})", code, s.name());
        if known {
            assert_eq!(s.code(), code);
        }
    }
}

/// The destination rule, through the binding: tests/destinations.tsv (the
/// table the C, CLI, Python and Elixir tests read) row by row — the format
/// and shape `ckpt::destination` gives, or its refusal — and what a writer
/// then makes of the file names.
#[test]
fn destinations_follow_the_shared_table() {
    let dir = scratch("destinations");
    fs::create_dir(dir.join("existing.pt")).unwrap();
    let table = fs::read_to_string(repo().join("tests/destinations.tsv")).unwrap();
    let mut rows = 0;
    for line in table.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let f: Vec<&str> = line.split('\t').collect();
        let mut path = dir.join(f[0]).into_os_string();
        if f[0].ends_with('/') {
            path.push("/");
        }
        let options = WriterOptions {
            format: if f[1] == "-" { None } else { Some(Format::from_name(f[1]).expect(f[1])) },
            ..Default::default()
        };
        let got = ckpt::destination(&path, &options);
        rows += 1;
        if f[2] == "refused" {
            let e = got.expect_err(f[0]);
            assert_eq!(e.status(), Status::InvalidArgument, "{}", f[0]);
            assert!(e.message().contains(f[4]) && e.message().contains("ckpt writes"), "{}: {}", f[0], e.message());
        } else {
            let d = got.unwrap_or_else(|e| panic!("{}: {}", f[0], e));
            assert_eq!((d.format, d.directory), (Format::from_name(f[2]).unwrap(), f[3] == "1"), "{}", f[0]);
        }
    }
    assert!(rows > 30);
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "nothing was made");
    assert_eq!(Format::for_path("a/pytorch_model.bin"), Some(Format::Torch));
    assert_eq!(Format::for_path("m.ckpt"), None);

    // A .safetensors name is a file, its parents made; a .pt name a torch file.
    for (name, format) in [("nd1/x.safetensors", Format::Safetensors), ("nd2/o.pt", Format::Torch)] {
        let mut w = Writer::create(dir.join(name), &WriterOptions::default()).unwrap();
        let i = w.add_tensor("w", Dtype::F32, &[2]).unwrap();
        w.begin().unwrap();
        w.write(i, &[1f32, 2.0]).unwrap();
        assert_eq!(w.commit().unwrap(), vec![dir.join(name)]);
        let c = Catalog::open(dir.join(name)).unwrap();
        assert_eq!(c.format(), format);
        assert_eq!(c.require("w").unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    }
    // With a maximum shard size, a file's parts and their index beside it.
    let mut w = Writer::create(dir.join("p.safetensors"), &WriterOptions::sharded(8)).unwrap();
    for name in ["a", "b"] {
        w.add_tensor(name, Dtype::F32, &[2]).unwrap();
    }
    w.begin().unwrap();
    w.write(0, &[1f32, 2.0]).unwrap();
    w.write(1, &[3f32, 4.0]).unwrap();
    let names: Vec<PathBuf> = ["p-00001-of-00002.safetensors", "p-00002-of-00002.safetensors", "p.safetensors.index.json"]
        .iter()
        .map(|n| dir.join(n))
        .collect();
    assert_eq!(w.commit().unwrap(), names);
}

/// A copy of resnet.pt (torch.save: a ZIP) with one byte of fc.weight's
/// data flipped, in a scratch directory.
fn torch_with_a_flipped_byte(test: &str) -> PathBuf {
    let fx = fixtures();
    let path = scratch(test).join("resnet.pt");
    fs::copy(fx.path("resnet.pt"), &path).unwrap();
    let at = Catalog::open(&path).unwrap().require("fc.weight").unwrap().offset() as usize + 5;
    let mut bytes = fs::read(&path).unwrap();
    bytes[at] ^= 0x40;
    fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn zip_crcs_are_checked_unless_skipped() {
    let path = torch_with_a_flipped_byte("crc");
    let cat = Catalog::open(&path).unwrap();
    let load = |skip_crc_check| {
        let mut plan = cat.plan().unwrap();
        plan.select("fc.weight").unwrap();
        plan.load_vecs(&LoadOptions { skip_crc_check, ..Default::default() })
    };
    let e = load(false).unwrap_err();
    assert_eq!((e.status(), e.tensor()), (Status::Checksum, Some("fc.weight")), "{}", e);
    assert!(e.message().contains("CRC"), "{}", e);
    assert_eq!(load(true).unwrap().len(), 1);

    let out = path.with_file_name("out.safetensors");
    let convert = |skip_crc_check| {
        ckpt::convert(&path, &out, &WriterOptions { skip_crc_check, no_sync: true, overwrite: true, ..Default::default() })
    };
    let e = convert(false).unwrap_err();
    assert_eq!(e.status(), Status::Checksum, "{}", e);
    assert!(e.message().contains("CRC") && !out.exists(), "{}", e);
    convert(true).unwrap();
    assert!(Catalog::open(&out).unwrap().require("fc.weight").is_ok());
}

const STAGE: &str = "..commit.ckpt-tmp-4242-d0";
const JOURNAL: &str = ".ckpt-commit.json";

/// A directory as a writer killed after deciding its commit leaves it: the
/// old model.safetensors, the new one staged, and the journal replacing
/// one by the other (the grammar of tests/cli/test_journal.py).
fn interrupted_commit(test: &str) -> PathBuf {
    let dir = scratch(test).join("model");
    fs::create_dir_all(dir.join(STAGE)).unwrap();
    for (path, value) in [(dir.join("model.safetensors"), 1.0f32), (dir.join(STAGE).join("model.safetensors"), 2.0)] {
        let mut w = Writer::create(&path, &WriterOptions { no_sync: true, ..Default::default() }).unwrap();
        let i = w.add_tensor("w", Dtype::F32, &[4]).unwrap();
        w.begin().unwrap();
        w.write(i, &[value; 4]).unwrap();
        w.commit().unwrap();
    }
    let fields = ["ckpt-commit-1", "stage", STAGE, "remove", "model.safetensors", "publish", "model.safetensors", "end"];
    fs::write(dir.join(JOURNAL), fields.iter().flat_map(|f| f.bytes().chain([0])).collect::<Vec<u8>>()).unwrap();
    dir
}

fn w_values(dir: &Path) -> Vec<f32> {
    let mut w = vec![0f32; 4];
    Catalog::open(dir).unwrap().require("w").unwrap().read_into(&mut w).unwrap();
    w
}

#[test]
fn recover_finishes_an_interrupted_commit_and_reports_it() {
    let dir = interrupted_commit("recover");
    assert_eq!(Catalog::open(&dir).unwrap_err().status(), Status::Incomplete);
    assert!(ckpt::recover(&dir, true).unwrap());
    assert!(dir.join(JOURNAL).exists() && dir.join(STAGE).exists(), "check changed the directory");
    assert!(ckpt::recover(&dir, false).unwrap());
    assert!(!dir.join(JOURNAL).exists() && !dir.join(STAGE).exists());
    assert_eq!(w_values(&dir), vec![2.0; 4]);
    assert!(!ckpt::recover(&dir, false).unwrap());
    assert!(!ckpt::recover(&dir, true).unwrap());
}

#[test]
fn recover_refuses_a_journal_ckpt_did_not_write() {
    let dir = interrupted_commit("recover_refuses");
    let fields = ["ckpt-commit-1", "stage", STAGE, "remove", "notes.txt", "end"];
    fs::write(dir.join(JOURNAL), fields.iter().flat_map(|f| f.bytes().chain([0])).collect::<Vec<u8>>()).unwrap();
    let e = ckpt::recover(&dir, false).unwrap_err();
    assert_eq!(e.status(), Status::Incomplete, "{}", e);
    assert!(e.path().is_some() && e.offset().is_some(), "{:?}", e);
    assert!(dir.join(JOURNAL).exists() && dir.join(STAGE).join("model.safetensors").exists());
    assert_eq!(ckpt::recover(dir.join("missing"), false).unwrap_err().status(), Status::NotFound);
}
