defmodule CkptTest do
  # Against files written by torch, safetensors and huggingface_hub, and
  # this binding's output read back by them.
  use ExUnit.Case, async: true
  import Ckpt.Fixtures

  @moduletag :tmp_dir

  defp check_file(file, format) do
    {:ok, c} = Ckpt.open(path(file))
    assert c.format == format
    want = tensors(file)
    infos = Map.new(Ckpt.tensors(c), &{&1.name, &1})
    assert map_size(infos) == length(want) and c.count == length(want)

    for {name, dtype, shape, bytes} <- want do
      info = infos[name]
      assert {info.dtype, info.shape, info.nbytes} == {dtype, shape, byte_size(bytes)}, name
      assert info.type == Ckpt.Types.to_type(dtype)
      assert Ckpt.read!(c, name) == bytes, name
      assert Ckpt.read!(c, name, copy: true) == bytes, name
    end

    assert Ckpt.metadata(c) == meta(file)
    c
  end

  test "reads every dtype written by safetensors' save_file, zero-copy" do
    c = check_file("dtypes.safetensors", :safetensors)
    assert Enum.all?(Ckpt.tensors(c), & &1.zero_copy)
    info = Enum.find(Ckpt.tensors(c), &(&1.name == "ünï.weight"))
    assert {info.type, info.shape} == {{:f, 32}, {2, 3}}
    assert Ckpt.read!(c, "ünï.weight") == for(i <- 0..5, into: <<>>, do: <<i + 0.0::float-32-little>>)
    assert %{dtype: "BOOL", type: {:u, 8}} = Enum.find(Ckpt.tensors(c), &(&1.name == "bool"))
    assert %{dtype: "F8_E4M3", type: {:f8_e4m3fn, 8}} = Enum.find(Ckpt.tensors(c), &(&1.name == "f8_e4m3"))
    assert Ckpt.read!(c, "scalar") == <<2.5::float-32-little>>
    assert Ckpt.read!(c, "empty") == ""
  end

  test "reads huggingface_hub shards" do
    c = check_file("sharded", :safetensors_sharded)
    assert length(c.files) == 3 and String.ends_with?(c.index_path, "model.safetensors.index.json")
  end

  test "reads torch files: state dicts, strided views, tied weights" do
    check_file("resnet.pt", :torch)
    c = check_file("views.pt", :torch)
    t = Enum.find(Ckpt.tensors(c), &(&1.name == "t"))
    refute t.zero_copy
    {_, {4, 3}, bytes} = expected("views_t")
    assert Ckpt.read!(c, "t") == bytes
    {:ok, all} = Ckpt.load(c)
    assert all["t"] == {bytes, {:f, 32}, {4, 3}}
    assert all["tied"] == all["base"]
  end

  test "load gives every tensor of a torch ResNet with its type and shape" do
    {:ok, params} = Ckpt.load(path("resnet.pt"))
    want = tensors("resnet.pt")
    assert map_size(params) == length(want)

    for {name, dtype, shape, bytes} <- want do
      assert params[name] == {bytes, Ckpt.Types.to_type(dtype), shape}, name
    end

    assert {<<n::signed-64-little>>, {:s, 64}, {}} = params["bn1.num_batches_tracked"]
    assert n >= 1000
    {:ok, list} = Ckpt.load(path("resnet.pt"), as: :list, copy: true, threads: 1)
    assert Enum.map(list, &elem(&1, 0)) == Enum.map(Ckpt.tensors(path("resnet.pt")), & &1.name)
    assert Map.new(list) == params
  end

  test "io: is the catalog's: a path opened so, an opened catalog read as it was opened" do
    {:ok, params} = Ckpt.load(path("resnet.pt"))

    for io <- [:buffered, :direct] do
      assert {:ok, ^params} = Ckpt.load(path("resnet.pt"), io: io)
      {:ok, c} = Ckpt.open(path("resnet.pt"), io: io)
      assert {:ok, ^params} = Ckpt.load(c)
      assert_raise ArgumentError, ~r/Ckpt.open\/2/, fn -> Ckpt.load(c, io: io) end
    end

    assert_raise ArgumentError, ~r/io: must be/, fn -> Ckpt.open(path("resnet.pt"), io: :fast) end
  end

  test "plan options apply in order, as torch computes them" do
    rn = Ckpt.open!(path("resnet.pt"))

    cases = [
      {"transpose_fc", [select: "fc.weight", transpose: "*"]},
      {"layout_conv1_hwio", [select: "conv1.weight", layout: "OIHW:HWIO"]},
      {"layout_conv1_hwio",
       [select: "conv1.weight", layout: {"conv*", {"OIHW", "HWIO"} |> then(fn {a, b} -> a <> ":" <> b end)}]},
      {"layout_conv1_hwio", [select: "conv1.weight", permute: {"*", [2, 3, 1, 0]}]},
      {"split_fc_1_of_3", [select: "fc.weight", split: {"*", 0, 1, 3}]},
      {"slice_fc_cols_2_5", [select: "fc.weight", slice: {"*", -1, 2..4}]},
      {"slice_fc_cols_2_5", [select: "fc.weight", slice: {"*", 1, 2, 5}]}
    ]

    for {case_, opts} <- cases do
      {dtype, shape, bytes} = expected(case_)
      assert {:ok, [{_, got}]} = Ckpt.load(rn, [as: :list] ++ opts), case_
      assert got == {bytes, Ckpt.Types.to_type(dtype), shape}, case_
    end

    st = Ckpt.open!(path("dtypes.safetensors"))

    {:ok, got} =
      Ckpt.load(st, select: ["bf16", "f32"], cast: [{"bf16", {:f, 32}}, {"f32", :bf16}], rename: %{"bf16" => "a"})

    {_, _, b1} = expected("cast_bf16_f32")
    {_, _, b2} = expected("cast_f32_bf16")
    assert got == %{"a" => {b1, {:f, 32}, {2, 3}}, "f32" => {b2, {:bf, 16}, {3, 4}}}

    {:ok, plan} =
      Ckpt.plan(rn, select: "layer1.*", exclude: "*num_batches_tracked", rename: {"layer1.", "stage1."}, cast: "F16")

    assert Enum.all?(plan, &(String.starts_with?(&1.name, "stage1.") and &1.dtype == "F16" and &1.transform))
    assert Enum.find(plan, &(&1.source == "layer1.0.conv1.weight")).name == "stage1.0.conv1.weight"

    assert {:error, %Ckpt.Error{status: status, tensor: "fc.weight"}} =
             Ckpt.load(rn, select: "fc.weight", slice: {"*", 0, 5, 500})

    assert status in [:out_of_range, :invalid_argument]
    assert_raise ArgumentError, fn -> Ckpt.load(rn, cast: {:q, 3}) end
    assert_raise ArgumentError, fn -> Ckpt.load(rn, frobnicate: true) end
  end

  test "zero-copy binaries come from the file's mapping; copies from the BEAM", %{tmp_dir: tmp} do
    file = Path.join(tmp, "big.safetensors")
    bin = :binary.copy(<<1, 2, 3, 4>>, 4 * 1024 * 1024)
    {:ok, [^file]} = Ckpt.save(%{"big" => {bin, {:u, 8}, {byte_size(bin)}}}, file)
    c = Ckpt.open!(file)
    refute mapped?(file)
    :erlang.garbage_collect()
    before = :erlang.memory(:binary)
    view = Ckpt.read!(c, "big")
    zero_copy_growth = :erlang.memory(:binary) - before
    assert mapped?(file)
    copy = Ckpt.read!(c, "big", copy: true)
    copy_growth = :erlang.memory(:binary) - before - zero_copy_growth
    assert view == bin and copy == bin
    assert zero_copy_growth < 1024 * 1024, "the zero-copy read allocated #{zero_copy_growth} bytes"
    # :erlang.memory counts the whole VM, where other tests run concurrently
    # and free binaries: a margin of 1 MiB still tells 16 MiB from none.
    assert copy_growth >= byte_size(bin) - 1024 * 1024, "the copy allocated only #{copy_growth} bytes"
    {:ok, %{"big" => {loaded, {:u, 8}, _}}} = Ckpt.load(c)
    assert loaded == bin
  end

  test "the garbage collector closes catalogs once their binaries are gone", %{tmp_dir: tmp} do
    file = Path.join(tmp, "gc.safetensors")
    {:ok, _} = Ckpt.save(%{"w" => {:binary.copy(<<0>>, 65536), {:u, 8}, {65536}}}, file)
    assert open_fds(file) == 0

    view =
      Task.async(fn ->
        c = Ckpt.open!(file)
        for _ <- 1..20, do: Ckpt.open!(file)
        Ckpt.read!(c, "w")
      end)
      |> Task.await()

    assert collected_until(fn -> open_fds(file) == 1 end), "the binary keeps its catalog open (and only it)"
    assert mapped?(file)
    assert byte_size(view) == 65536
    _ = view
    view = nil
    assert collected_until(fn -> open_fds(file) == 0 and not mapped?(file) end), "the catalog outlived its binary"
    assert view == nil
  end

  # Collects every process until `done` holds, for at most about 2 s: a
  # resource's destructor runs once the last process holding it has been
  # collected, which other tests running at the same time can delay.
  defp collected_until(done, tries \\ 100) do
    for p <- Process.list(), do: :erlang.garbage_collect(p)
    Process.sleep(20)
    cond do
      done.() -> true
      tries > 1 -> collected_until(done, tries - 1)
      true -> false
    end
  end

  test "save writes sharded safetensors that safetensors and Python's ckpt.load read back", %{tmp_dir: tmp} do
    out = Path.join(tmp, "sharded")
    {:ok, files} = Ckpt.save(tree(), out, max_shard_size: "600B")
    assert length(files) > 2 and List.last(files) == Path.join(out, "model.safetensors.index.json")
    assert Enum.all?(files, &File.exists?/1)
    py!(["tree-check", out])
    assert Ckpt.load_tree!(out) == tree()
    {:ok, c} = Ckpt.open(out)
    assert c.format == :safetensors_sharded
    index = File.read!(List.last(files))
    assert index =~ ~s("ckpt.tree")
  end

  test "a one-file save is byte-identical to Python's ckpt.save of the same tree", %{tmp_dir: tmp} do
    py_dir = Path.join(tmp, "py")
    py!(["tree-save", py_dir])
    {:ok, [file]} = Ckpt.save(tree(), Path.join(tmp, "ex"))
    assert Path.basename(file) == "model.safetensors"
    assert File.read!(file) == File.read!(Path.join(py_dir, "model.safetensors"))
  end

  test "a catalog's object tree comes as terms built from libckpt's values" do
    assert %Ckpt.Catalog{tree: {:obj, [{"__dict__", pairs}]}} = Ckpt.open!(path("train.pt"))

    assert pairs == [
             ["model", {:obj, [{"__dict__", [["w", {:obj, [{"__tensor__", "model.w"}]}]]}]}],
             ["epoch", 3],
             ["opt", {:obj, [{"__dict__", [["lr", 0.1], ["betas", {:obj, [{"__tuple__", [0.9, 0.999]}]}]]}]}],
             ["name", "run"]
           ]

    assert Ckpt.open!(path("dtypes.safetensors")).tree == nil
  end

  test "load_tree restores Python's ckpt.save trees and torch object trees" do
    assert Ckpt.load_tree!(path("py_tree")) == tree()
    {_, {2, 2}, w} = hd(for({"model.w", d, s, b} <- tensors("train.pt"), do: {d, s, b}))

    assert Ckpt.load_tree!(path("train.pt")) == %{
             "model" => %{"w" => {w, {:f, 32}, {2, 2}}},
             "epoch" => 3,
             "opt" => %{"lr" => 0.1, "betas" => {0.9, 0.999}},
             "name" => "run"
           }

    tree = Ckpt.load_tree!(path("sharded"), leaf: fn {bin, type, shape} -> {:leaf, byte_size(bin), type, shape} end)
    assert %{"model" => %{"layers" => layers}} = tree
    assert length(layers) == 6 and hd(layers) == %{"weight" => {:leaf, 8192, {:bf, 16}, {64, 64}}}
  end

  test "round trips keep maps, lists, tuples, int keys and plain values", %{tmp_dir: tmp} do
    t = leaf("F32", {2, 3}, 1)

    params = %{
      "enc" => %{"layers" => [%{"w" => t}, %{"w" => leaf("BF16", {4}, 2)}]},
      "pair" => {t, {leaf("U8", {0}, 3), []}},
      3 => t,
      "step" => 5,
      "name" => "run ✓",
      "none" => nil,
      "flags" => [true, false],
      "lr" => 1.0e-5,
      "bad" => :nan,
      "empty" => %{}
    }

    out = Path.join(tmp, "rt")
    {:ok, _} = Ckpt.save(params, out)
    assert Ckpt.load_tree!(out) == params

    flat = %{"a" => t, "b" => leaf("I64", {2}, 1)}
    {:ok, [f]} = Ckpt.save(flat, Path.join(tmp, "flat.safetensors"))
    refute Map.has_key?(Ckpt.metadata(f), "ckpt.tree")
    assert Ckpt.load_tree!(f) == flat
    dotted = %{"a.b" => t, "0" => t}
    {:ok, [f]} = Ckpt.save(dotted, Path.join(tmp, "dotted.safetensors"), metadata: %{"step" => "7"})
    assert Ckpt.metadata(f)["step"] == "7" and Map.has_key?(Ckpt.metadata(f), "ckpt.tree")
    assert Ckpt.load_tree!(f) == dotted
    # as many tensors as top-level keys, but nested, beside a plain value
    nested = %{"enc" => %{"w" => t, "step" => 1000}}
    {:ok, [f]} = Ckpt.save(nested, Path.join(tmp, "nested.safetensors"))
    assert Ckpt.load_tree!(f) == nested
  end

  defmodule Param do
    defstruct [:data, :type, :shape]
  end

  test "save takes structs through a leaf function and refuses what it cannot name", %{tmp_dir: tmp} do
    p = %Param{data: gen("F32", {4}, 1), type: {:f, 32}, shape: {4}}
    out = Path.join(tmp, "structs.safetensors")
    {:ok, _} = Ckpt.save(%{"layer" => %{"w" => p}}, out, leaf: fn %Param{} = x -> {x.data, x.type, x.shape} end)

    assert Ckpt.load_tree!(out, leaf: fn {d, t, s} -> %Param{data: d, type: t, shape: s} end) == %{
             "layer" => %{"w" => p}
           }

    bad = [
      {%{w: leaf("F32", {2}, 1)}, ~r/atom keys/},
      {%{"w" => {<<0, 0, 0>>, {:f, 32}, {1}}}, ~r/3 bytes/},
      {%{"w" => {<<0::32>>, {:q, 7}, {1}}}, ~r/unknown type/},
      {%{"w" => self()}, ~r/neither a tensor/},
      {%{"w" => p}, ~r/neither a tensor/},
      {%{"a" => %{"b" => leaf("F32", {1}, 1)}, "a.b" => leaf("F32", {1}, 1)}, ~r/two entries/}
    ]

    for {params, why} <- bad do
      e = assert_raise ArgumentError, fn -> Ckpt.save(params, Path.join(tmp, "bad")) end
      assert e.message =~ why
    end

    refute File.exists?(Path.join(tmp, "bad"))
  end

  test "errors carry the status, file, tensor and byte offset", %{tmp_dir: tmp} do
    corpus = hostile()
    assert length(corpus) >= 50

    for {file, status} <- corpus do
      assert {:error, %Ckpt.Error{} = e} = Ckpt.open(file), file
      assert Ckpt.Error.name(e) == status, "#{file}: #{Exception.message(e)}"
      assert e.path && String.starts_with?(e.path, Path.dirname(file)), file
      assert Exception.message(e) =~ "[#{status}]"
    end

    assert {:error, %Ckpt.Error{status: :corrupt, code: 18, detail: :data_hole, detail_code: 31, tensor: "b", offset: 118}} =
             Ckpt.open(Path.join(repo(), "tests/hostile/corpus/st-hole.safetensors"))

    assert {:error, %Ckpt.Error{status: :not_found}} = Ckpt.open(Path.join(tmp, "none.safetensors"))
    assert_raise Ckpt.Error, ~r/CKPT_E_NOT_FOUND/, fn -> Ckpt.open!(Path.join(tmp, "none")) end

    cut = Path.join(tmp, "cut.safetensors")
    File.cp!(path("dtypes.safetensors"), cut)
    c = Ckpt.open!(cut)
    last = Enum.max_by(Enum.filter(Ckpt.tensors(c), &(&1.nbytes > 1)), & &1.offset)
    {:ok, fd} = :file.open(cut, [:read, :write, :binary])
    {:ok, _} = :file.position(fd, last.offset + 1)
    :ok = :file.truncate(fd)
    :ok = File.close(fd)
    assert {:error, %Ckpt.Error{status: :truncated, path: ^cut}} = Ckpt.read(c, last.name, copy: true)
    assert {:error, %Ckpt.Error{status: :truncated}} = Ckpt.read(c, last.name)

    {:ok, _} = Ckpt.save(%{"a" => leaf("F32", {1}, 1)}, Path.join(tmp, "x.safetensors"))

    # Safe by default, as ckpt.save and the CLI: replacing takes overwrite: true.
    assert {:error, %Ckpt.Error{status: :exists}} = Ckpt.save(%{"a" => leaf("F32", {1}, 1)}, Path.join(tmp, "x.safetensors"))
    {:ok, _} = Ckpt.save(%{"a" => leaf("F32", {2}, 1)}, Path.join(tmp, "x.safetensors"), overwrite: true)
    assert [%{shape: {2}}] = Ckpt.tensors(Ckpt.open!(Path.join(tmp, "x.safetensors")))

    assert {:error, %Ckpt.Error{status: :bad_size}} = Ckpt.save(tree(), Path.join(tmp, "y"), max_shard_size: "lots")
  end

  test "a boolean option that is not a boolean raises, naming it, and nothing is written", %{tmp_dir: tmp} do
    # `overwrite: "yes"` used to mean false and `check_crc: "no"` true, silently.
    out = Path.join(tmp, "x.safetensors")
    {:ok, _} = Ckpt.save(%{"a" => leaf("F32", {1}, 1)}, out)
    before = File.read!(out)
    new = %{"a" => leaf("F32", {2}, 2)}

    calls = [
      {"Ckpt.save: overwrite", fn v -> Ckpt.save(new, out, overwrite: v) end},
      {"Ckpt.save: no_sync", fn v -> Ckpt.save(new, out, overwrite: true, no_sync: v) end},
      {"Ckpt.save: checksums", fn v -> Ckpt.save(new, out, overwrite: true, checksums: v) end},
      {"Ckpt.convert: overwrite", fn v -> Ckpt.convert(out, out, overwrite: v) end},
      {"Ckpt.convert: check_crc", fn v -> Ckpt.convert(out, out, overwrite: true, check_crc: v) end},
      {"Ckpt.destination: overwrite", fn v -> Ckpt.destination(out, overwrite: v) end},
      {"Ckpt.Writer.create: overwrite", fn v -> Ckpt.Writer.create(out, overwrite: v) end},
      {"Ckpt.load: check_crc", fn v -> Ckpt.load(out, check_crc: v) end},
      {"Ckpt.load: copy", fn v -> Ckpt.load(out, copy: v) end},
      {"Ckpt.load_tree: copy", fn v -> Ckpt.load_tree(out, copy: v) end},
      {"Ckpt.read: copy", fn v -> Ckpt.read(out, "a", copy: v) end},
      {"Ckpt.recover: check", fn v -> Ckpt.recover(tmp, check: v) end}
    ]

    for {where, call} <- calls, value <- ["yes", "no", nil, 1, :yes] do
      message = "#{where} must be a boolean, not #{inspect(value)}"
      assert_raise ArgumentError, message, fn -> call.(value) end
    end

    assert File.read!(out) == before
    assert File.ls!(tmp) == ["x.safetensors"]
  end

  test "the streaming writer commits atomically and leaves nothing when aborted", %{tmp_dir: tmp} do
    out = Path.join(tmp, "w.safetensors")
    {:ok, w} = Ckpt.Writer.create(out)
    :ok = Ckpt.Writer.set_metadata(w, "format", "pt")
    {:ok, i} = Ckpt.Writer.add(w, "w", {:f, 32}, {64})
    {:ok, j} = Ckpt.Writer.add(w, "b", "BOOL", {3})
    {:ok, [^out]} = Ckpt.Writer.begin(w)
    data = gen("F32", {64}, 2)
    :ok = Ckpt.Writer.write(w, i, binary_part(data, 0, 100))
    :ok = Ckpt.Writer.write(w, i, [binary_part(data, 100, 56), binary_part(data, 156, 100)])
    :ok = Ckpt.Writer.write(w, j, <<1, 0, 1>>)
    assert {:error, %Ckpt.Error{status: :out_of_range, tensor: "b"}} = Ckpt.Writer.write(w, j, <<1>>)
    refute File.exists?(out)
    {:ok, [^out]} = Ckpt.Writer.commit(w)
    assert {:error, %Ckpt.Error{status: :bad_state}} = Ckpt.Writer.commit(w)
    safetensors_check!(out, [{"w", "F32", {64}, data}, {"b", "BOOL", {3}, <<1, 0, 1>>}], %{"format" => "pt"})
    py!(["resave-cmp", out])

    other = Path.join(tmp, "aborted")
    {:ok, w} = Ckpt.Writer.create(other, max_shard_size: "1KB")
    {:ok, _} = Ckpt.Writer.add(w, "w", {:f, 32}, {64})
    {:ok, _} = Ckpt.Writer.begin(w)
    :ok = Ckpt.Writer.abort(w)

    assert File.ls!(tmp)
           |> Enum.filter(&String.starts_with?(&1, "aborted"))
           |> Enum.all?(&(File.ls!(Path.join(tmp, &1)) == []))
  end

  test "convert persists a converted checkpoint, checked by safetensors", %{tmp_dir: tmp} do
    out = Path.join(tmp, "cast.safetensors")

    :ok =
      Ckpt.convert(path("dtypes.safetensors"), out,
        select: ["f32", "bf16"],
        cast: [{"f32", :bf16}, {"bf16", {:f, 32}}],
        rename: {"bf16", "widened"},
        no_sync: true
      )

    {"BF16", {3, 4}, narrowed} = expected("cast_f32_bf16")
    {"F32", {2, 3}, widened} = expected("cast_bf16_f32")
    safetensors_check!(out, [{"f32", "BF16", {3, 4}, narrowed}, {"widened", "F32", {2, 3}, widened}])
    all = Path.join(tmp, "all")
    :ok = Ckpt.convert(path("resnet.pt"), all, max_shard_size: "100KB")
    safetensors_check!(all, tensors("resnet.pt"), %{"format" => "pt"})
    assert {:error, %Ckpt.Error{status: :exists}} = Ckpt.convert(path("resnet.pt"), all)
  end

  test "checksums recorded by save are verified", %{tmp_dir: tmp} do
    out = Path.join(tmp, "sum")
    {:ok, _} = Ckpt.save(tree(), out, checksums: true, max_shard_size: "1KB")
    assert {:ok, 9} = Ckpt.verify(out)
    assert {:ok, %{tensor_digests: 9, chunk_digests: 0, zip_crc32: 0, tensors: 9, file_sha256: 0}} =
             Ckpt.verify_report(out)
    # A 5 MiB tensor records a digest per 1 MiB chunk: ceil(5) + 1 of them.
    big = Path.join(tmp, "big.safetensors")
    {:ok, _} = Ckpt.save(%{"big" => {:binary.copy(<<0, 0, 128, 62>>, 1_310_720), {:f, 32}, {1_310_720}}}, big, checksums: true)
    assert {:ok, %{tensor_digests: 1, chunk_digests: 6, header_digests: 1}} = Ckpt.verify_report(big)
    assert {:ok, %{zip_crc32: crcs, tensor_digests: 0}} = Ckpt.verify_report(path("resnet.pt"))
    assert crcs > 0
    assert {:ok, 10_000} = Ckpt.parse_size("10KB")
    assert Ckpt.version() =~ ~r/^\d+\.\d+\.\d+$/
  end

  test "many processes read one catalog at once" do
    c = Ckpt.open!(path("resnet.pt"))
    want = tensors("resnet.pt")

    want
    |> Task.async_stream(fn {name, _, _, bytes} -> Ckpt.read!(c, name) == bytes end, max_concurrency: 8)
    |> Enum.each(fn {:ok, same} -> assert same end)
  end

  test "a hostile or broken structure is an error naming the file, never a crash", %{tmp_dir: tmp} do
    {_, structure, false} = Ckpt.Tree.flatten(tree())
    n = byte_size(structure)

    broken =
      [
        "not json",
        String.duplicate("[", 200_000),
        String.duplicate("{\"__tuple__\":", 5000) <> "[]" <> String.duplicate("}", 5000),
        ~s({"__dict__": 5}),
        ~s({"__dict__": [[1]]}),
        ~s({"__tensor__": "missing"}),
        ~s({"__bytes__": "zz"}),
        ~s({"__float__": 7}),
        ~s([1e999999]),
        String.duplicate("9", 100_000),
        ~s("\\ud800")
      ] ++ for(cut <- 1..(n - 1)//max(1, div(n, 40)), do: binary_part(structure, 0, cut))

    for {text, i} <- Enum.with_index(broken) do
      file = Path.join(tmp, "b#{i}.safetensors")
      {:ok, w} = Ckpt.Writer.create(file, no_sync: true)
      :ok = Ckpt.Writer.set_metadata(w, "ckpt.tree", text)
      {:ok, k} = Ckpt.Writer.add(w, "7", {:s, 64}, {3})
      {:ok, _} = Ckpt.Writer.begin(w)
      :ok = Ckpt.Writer.write(w, k, gen("I64", {3}, 1))
      {:ok, _} = Ckpt.Writer.commit(w)

      case Ckpt.load_tree(file) do
        {:error, %Ckpt.Error{status: :corrupt, detail: :header_schema, path: ^file, message: m}} -> assert m =~ "ckpt.tree"
        {:ok, t} -> assert is_map(t) or is_list(t) or is_tuple(t), inspect(String.slice(text, 0, 40))
      end
    end

    flat = Path.join(tmp, "clash.safetensors")
    {:ok, _} = Ckpt.save(%{"a" => leaf("F32", {1}, 1), "a.b" => leaf("F32", {1}, 1)}, flat)
    File.rm!(flat)
    {:ok, w} = Ckpt.Writer.create(flat, no_sync: true)
    {:ok, a} = Ckpt.Writer.add(w, "a", {:f, 32}, {1})
    {:ok, b} = Ckpt.Writer.add(w, "a.b", {:f, 32}, {1})
    {:ok, _} = Ckpt.Writer.begin(w)
    :ok = Ckpt.Writer.write(w, a, <<0::32>>)
    :ok = Ckpt.Writer.write(w, b, <<0::32>>)
    {:ok, _} = Ckpt.Writer.commit(w)
    assert {:error, %Ckpt.Error{status: :corrupt, detail: :header_schema, message: m}} = Ckpt.load_tree(flat)
    assert m =~ "do not nest"
  end

  test "a URL's user part never shows: only libckpt's redaction of it" do
    data = File.read!(path("dtypes.safetensors"))
    {:ok, listen} = :gen_tcp.listen(0, [:binary, active: false, reuseaddr: true, ip: {127, 0, 0, 1}])
    {:ok, port} = :inet.port(listen)
    spawn_link(fn -> serve_file(listen, data) end)

    for user <- ["ghp_S3cr3tT0k3n", "alice:ghp_S3cr3tT0k3n"] do
      {:ok, c} = Ckpt.open("http://#{user}@127.0.0.1:#{port}/m.safetensors")
      assert c.path == "http://REDACTED@127.0.0.1:#{port}/m.safetensors"
      refute inspect(c) =~ "S3cr3t"
      assert Ckpt.read!(c, "scalar", copy: true) == <<2.5::float-32-little>>
    end

    assert Ckpt.NIF.redact_name("https://u:S3cr3t@h/x?token=S3cr3t&v=1") == "https://REDACTED@h/x?token=REDACTED&v=1"
    assert Ckpt.NIF.redact_name("/a/b.safetensors") == "/a/b.safetensors"
    :gen_tcp.close(listen)
  end

  # One small file for every request, whole, as a 206 (one request per connection).
  defp serve_file(listen, data) do
    with {:ok, s} <- :gen_tcp.accept(listen) do
      read_request(s, "")
      n = byte_size(data)

      :gen_tcp.send(
        s,
        "HTTP/1.1 206 Partial Content\r\nETag: \"e\"\r\nContent-Range: bytes 0-#{n - 1}/#{n}\r\n" <>
          "Content-Length: #{n}\r\nConnection: close\r\n\r\n" <> data
      )

      :gen_tcp.close(s)
      serve_file(listen, data)
    end
  end

  test "the destination rule: the table every binding reads (tests/destinations.tsv)", %{tmp_dir: tmp} do
    File.mkdir!(Path.join(tmp, "existing.pt"))

    rows =
      Path.join(Ckpt.Fixtures.repo(), "tests/destinations.tsv")
      |> File.read!()
      |> String.split("\n", trim: true)
      |> Enum.reject(&String.starts_with?(&1, "#"))

    for line <- rows do
      [name, asked, want, directory, says] = String.split(line, "\t")
      path = Path.join(tmp, name) <> if(String.ends_with?(name, "/"), do: "/", else: "")
      format = if asked == "-", do: nil, else: String.to_atom(String.replace(asked, "-", "_"))

      case {want, Ckpt.destination(path, format: format)} do
        {"refused", {:error, e}} ->
          assert e.status == :invalid_argument and e.message =~ says and e.message =~ "ckpt writes", name

        {"refused", other} ->
          flunk("#{name}: #{inspect(other)}")

        {_, got} ->
          assert got == {:ok, %{format: String.to_atom(String.replace(want, "-", "_")), directory: directory == "1"}},
                 name
      end
    end

    assert length(rows) > 30
    assert File.ls!(tmp) == ["existing.pt"]

    # save: a .safetensors name is that file (its parents made), a .pt name a torch.save file.
    params = %{"w" => {<<1.0::float-32-little, 2.0::float-32-little>>, {:f, 32}, {2}}}
    for {name, format} <- [{"nd1/x.safetensors", :safetensors}, {"nd2/o.pt", :torch}] do
      assert Ckpt.save(params, Path.join(tmp, name)) == {:ok, [Path.join(tmp, name)]}
      {:ok, c} = Ckpt.open(Path.join(tmp, name))
      assert c.format == format
      assert Ckpt.read!(c, "w") == <<1.0::float-32-little, 2.0::float-32-little>>
    end

    # With a maximum shard size, the file's parts and their index beside it.
    two = Map.put(params, "v", {<<3.0::float-32-little, 4.0::float-32-little>>, {:f, 32}, {2}})
    names = ["p-00001-of-00002.safetensors", "p-00002-of-00002.safetensors", "p.safetensors.index.json"]
    assert Ckpt.save(two, Path.join(tmp, "p.safetensors"), max_shard_size: 8) == {:ok, Enum.map(names, &Path.join(tmp, &1))}
  end

  defp read_request(s, got) do
    if String.contains?(got, "\r\n\r\n") do
      got
    else
      case :gen_tcp.recv(s, 0, 5000) do
        {:ok, more} -> read_request(s, got <> more)
        _ -> got
      end
    end
  end
  # A copy of resnet.pt (torch.save: a ZIP) with one byte of fc.weight's data flipped.
  defp torch_with_a_flipped_byte(tmp) do
    file = Path.join(tmp, "resnet.pt")
    File.cp!(path("resnet.pt"), file)
    %{offset: at} = Enum.find(Ckpt.tensors(Ckpt.open!(file)), &(&1.name == "fc.weight"))
    bytes = File.read!(file)
    <<head::binary-size(at + 5), b, rest::binary>> = bytes
    File.write!(file, [head, Bitwise.bxor(b, 0x40), rest])
    file
  end

  test "ZIP CRC-32s are checked unless check_crc: false", %{tmp_dir: tmp} do
    file = torch_with_a_flipped_byte(tmp)
    opts = [select: "fc.weight", copy: true]
    assert {:error, %Ckpt.Error{status: :checksum, detail: :checksum, tensor: "fc.weight", message: m}} = Ckpt.load(file, opts)
    assert m =~ "CRC"
    assert {:ok, %{"fc.weight" => _}} = Ckpt.load(file, opts ++ [check_crc: false])
    assert {:error, %Ckpt.Error{status: :checksum, detail: :checksum, tensor: "fc.weight"}} = Ckpt.load_tree(file, copy: true)
    assert {:ok, %{"fc.weight" => _}} = Ckpt.load_tree(file, copy: true, check_crc: false)

    out = Path.join(tmp, "out.safetensors")
    assert {:error, %Ckpt.Error{status: :checksum, detail: :checksum, message: m}} = Ckpt.convert(file, out, no_sync: true)
    assert m =~ "CRC" and not File.exists?(out)
    assert :ok = Ckpt.convert(file, out, no_sync: true, check_crc: false)
    assert %{"fc.weight" => _} = Ckpt.load!(out)
  end

  @stage "..commit.ckpt-tmp-4242-d0"
  @journal ".ckpt-commit.json"

  defp journal(dir, fields),
    do: File.write!(Path.join(dir, @journal), Enum.map(["ckpt-commit-1", "stage", @stage | fields] ++ ["end"], &[&1, 0]))

  defp write_w(path, value) do
    {:ok, w} = Ckpt.Writer.create(path, no_sync: true)
    {:ok, i} = Ckpt.Writer.add(w, "w", {:f, 32}, {4})
    {:ok, _} = Ckpt.Writer.begin(w)
    :ok = Ckpt.Writer.write(w, i, :binary.copy(<<value::float-32-little>>, 4))
    {:ok, _} = Ckpt.Writer.commit(w)
  end

  # A directory as a writer killed after deciding its commit leaves it: the
  # old model.safetensors, the new one staged, the journal replacing one by
  # the other (the grammar of tests/cli/test_journal.py).
  defp interrupted_commit(tmp) do
    dir = Path.join(tmp, "model")
    File.mkdir_p!(Path.join(dir, @stage))
    write_w(Path.join(dir, "model.safetensors"), 1.0)
    write_w(Path.join([dir, @stage, "model.safetensors"]), 2.0)
    journal(dir, ["remove", "model.safetensors", "publish", "model.safetensors"])
    dir
  end

  test "recover finishes an interrupted commit and says whether there was one", %{tmp_dir: tmp} do
    dir = interrupted_commit(tmp)
    assert {:error, %Ckpt.Error{status: :incomplete}} = Ckpt.open(dir)
    assert {:ok, true} = Ckpt.recover(dir, check: true)
    assert File.exists?(Path.join(dir, @journal)) and File.dir?(Path.join(dir, @stage))
    assert {:ok, true} = Ckpt.recover(dir)
    refute File.exists?(Path.join(dir, @journal)) or File.exists?(Path.join(dir, @stage))
    assert {:ok, %{"w" => {w, {:f, 32}, {4}}}} = Ckpt.load(dir, copy: true)
    assert w == :binary.copy(<<2.0::float-32-little>>, 4)
    assert {:ok, false} = Ckpt.recover(dir)
    assert false == Ckpt.recover!(dir, check: true)
  end

  test "recover refuses a journal ckpt did not write and leaves it", %{tmp_dir: tmp} do
    dir = interrupted_commit(tmp)
    journal(dir, ["remove", "notes.txt"])
    assert {:error, %Ckpt.Error{status: :incomplete, path: p, offset: off}} = Ckpt.recover(dir)
    assert p != nil and off != nil
    assert File.exists?(Path.join(dir, @journal)) and File.exists?(Path.join([dir, @stage, "model.safetensors"]))
    assert_raise Ckpt.Error, fn -> Ckpt.recover!(Path.join(dir, "missing")) end
  end
end
