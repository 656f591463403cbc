defmodule Ckpt do
  @moduledoc """
  Checkpoints of large models from Elixir, through libckpt: safetensors
  (single or Hugging Face sharded) and PyTorch `torch.save` files (read
  without running any pickle), with memory that does not grow with the
  model.

      {:ok, ckpt} = Ckpt.open("model.safetensors")
      Ckpt.tensors(ckpt)                # names, dtypes, types, shapes: headers only
      {:ok, bin} = Ckpt.read(ckpt, "embed.weight")   # zero-copy over the file's mapping
      Nx.from_binary(bin, {:bf, 16}) |> Nx.reshape({32000, 4096})

      # Loaded with a plan: only these tensors, renamed, cast, transposed.
      {:ok, params} = Ckpt.load("pytorch_model.bin", select: "encoder.*", rename: {"encoder.", ""},
                                cast: {:f, 32}, transpose: "*.dense.weight")

      # Nested params (maps, lists, tuples) to sharded safetensors and back.
      {:ok, _files} = Ckpt.save(params, "out/", max_shard_size: "5GB")
      {:ok, ^params} = Ckpt.load_tree("out/")

  Tensors are `{binary, type, shape}`: `type` an Nx type (`{:f, 32}`,
  `{:bf, 16}`, …, see `Ckpt.Types`), `shape` a tuple; Nx users write
  `Nx.from_binary(bin, type) |> Nx.reshape(shape)`.  Binaries of tensors
  that need no conversion are zero-copy views of the file's read-only
  mapping (`copy: true` asks for copies): the catalog stays open, and the
  file mapped, until the last such binary is garbage-collected.

  Reads and writes run on dirty I/O schedulers.  Failures are
  `{:error, %Ckpt.Error{}}` naming the status, file, tensor and byte
  offset; the `!` variants raise it.
  """

  alias Ckpt.{Catalog, Error, NIF, Tree, Types}

  @type catalog :: Catalog.t()
  @type source :: Catalog.t() | Path.t()
  @type tensor :: {binary, Types.type(), tuple}

  @doc "libckpt's version."
  def version, do: NIF.version()

  @doc """
  Opens a checkpoint — a `.safetensors` file, a `*.index.json`, a torch
  `.bin`/`.pt` file, or a directory holding one — reading and validating
  its headers only.  The catalog is closed by the garbage collector.

  `io: :auto | :buffered | :direct` says how every read of it goes
  (libckpt's `ckpt_catalog_options.io`): `:auto` (the default) through the
  page cache, large uncached files read with O_DIRECT by a load;
  `:buffered` always through the page cache; `:direct` around it
  (O_DIRECT, no zero-copy binaries).
  """
  @spec open(Path.t(), keyword) :: {:ok, catalog} | {:error, Error.t()}
  def open(path, opts \\ []) do
    path = IO.chardata_to_string(path)
    opts = Keyword.validate!(opts, io: :auto)

    with {:ok, ref} <- Error.wrap(NIF.open(path, io_mode(opts[:io]))) do
      {format, files, index, tree, count} = NIF.info(ref)

      # The name as shown: a URL's credentials stay in the library's catalog.
      shown = NIF.redact_name(path)

      {:ok,
       %Catalog{ref: ref, path: shown, format: format, files: files, index_path: index, tree: tree, count: count}}
    end
  end

  @doc "Like `open/1`, raising `Ckpt.Error`."
  def open!(path, opts \\ []), do: bang(open(path, opts))

  @doc """
  The tensors, in the order of their data: maps with `:name`, `:dtype`
  (the safetensors name), `:type` (see `Ckpt.Types`), `:shape` (a tuple),
  `:nbytes`, `:file` (index into the catalog's `files`), `:offset` (of the
  data in that file) and `:zero_copy` (whether `read/3` can map it).
  """
  @spec tensors(source) :: [map]
  def tensors(source) do
    with_catalog!(source, fn c ->
      for {name, dtype, shape, nbytes, file, offset, viewable} <- NIF.tensors(c.ref) do
        %{
          name: name,
          dtype: dtype,
          type: Types.to_type(dtype),
          shape: shape,
          nbytes: nbytes,
          file: file,
          offset: offset,
          zero_copy: viewable
        }
      end
    end)
  end

  @doc "The `__metadata__` map (for shards, the union of theirs)."
  @spec metadata(source) :: %{String.t() => String.t()}
  def metadata(source), do: with_catalog!(source, &Map.new(NIF.metadata(&1.ref)))

  @doc """
  A tensor's bytes (dense, row-major, little-endian) as a binary: a
  zero-copy resource binary over the file's read-only mapping when they
  need no conversion, else read into a new binary (a torch view saved with
  strides, big-endian or compressed data).  `copy: true` always copies.
  """
  @spec read(source, String.t(), keyword) :: {:ok, binary} | {:error, Error.t()}
  def read(source, name, opts \\ []) do
    opts = Keyword.validate!(opts, copy: false) |> Ckpt.Writer.flags!("Ckpt.read", [:copy])
    with_catalog(source, fn c -> Error.wrap(NIF.read(c.ref, name, opts[:copy])) end)
  end

  @doc "Like `read/3`, raising `Ckpt.Error`."
  def read!(source, name, opts \\ []), do: bang(read(source, name, opts))

  @load_opts [:threads, :copy, :io, :as, :check_crc]

  @doc """
  Loads tensors with libckpt's engine (parallel reads, a bounded bounce
  ring) into `%{name => {binary, type, shape}}` (or, with `as: :list`, a
  list of `{name, {binary, type, shape}}` in checkpoint order).

  Plan options apply in the order given, to the tensors whose name in the
  checkpoint matches a glob (`*` any run of characters, `?` one):

    * `select: glob | [glob]` — keep only these (later selects add);
    * `exclude: glob | [glob]`;
    * `rename: {from, to} | [{from, to}] | %{from => to}` — a prefix
      (`{"model.", ""}`) or a `*` pattern (`{"layers.*.attn.*", "h.*.a.*"}`);
    * `cast: type | {glob, type} | [{glob, type}]` — float tensors to a
      float type (bit-exact with torch), or integers to a wider one;
    * `transpose: glob | [glob]` — 2-D tensors;
    * `layout: "OIHW:HWIO" | {glob, "OIHW:HWIO"} | [...]` — axes by letters
      (e.g. torch conv kernels to Axon's);
    * `permute: {glob, [axes]} | [...]`;
    * `slice: {glob, dim, first..last//1} | {glob, dim, start, stop} | [...]`;
    * `split: {glob, dim, rank, parts} | [...]` — tensor-parallel parts.

  Other options: `threads:` (0: libckpt's choice), `io: :auto | :buffered
  | :direct` (a path's: as `open/2` takes it; a catalog reads as it was
  opened), `copy: true` (no zero-copy binaries), `check_crc: false`
  (as Python's: do not check the CRC-32s of ZIP members — torch.save
  files, .npz archives; by default every member whose bytes are read
  whole is checked, a mismatch a `:checksum` error naming the member;
  zero-copy binaries read nothing, so they go unchecked).
  """
  @spec load(source, keyword) :: {:ok, map | list} | {:error, Error.t()}
  def load(source, opts \\ []) do
    {rules, rest} = rules(opts)
    rest = Keyword.validate!(rest, threads: 0, copy: false, io: nil, as: :map, check_crc: true)
    Ckpt.Writer.flags!(rest, "Ckpt.load", [:copy, :check_crc])

    with_catalog(source, rest[:io], fn c ->
      with {:ok, items} <- Error.wrap(NIF.load(c.ref, rules, {rest[:threads], rest[:copy], rest[:check_crc] != false})) do
        list = for {name, dtype, shape, bin} <- items, do: {name, {bin, Types.to_type(dtype), shape}}
        {:ok, if(rest[:as] == :list, do: list, else: Map.new(list))}
      end
    end)
  end

  @doc "Like `load/2`, raising `Ckpt.Error`."
  def load!(source, opts \\ []), do: bang(load(source, opts))

  @doc """
  What `load/2` with these plan options would give, reading no data: maps
  with `:name` (after renames), `:source` (the name in the checkpoint),
  `:dtype`, `:type`, `:shape`, `:nbytes` and `:transform` (whether bytes
  are converted on the way).
  """
  def plan(source, opts \\ []) do
    {rules, []} = rules(opts)

    with_catalog(source, fn c ->
      with {:ok, items} <- Error.wrap(NIF.plan(c.ref, rules)) do
        {:ok,
         for {name, src, dtype, shape, nbytes, transform} <- items do
           %{
             name: name,
             source: src,
             dtype: dtype,
             type: Types.to_type(dtype),
             shape: shape,
             nbytes: nbytes,
             transform: transform
           }
         end}
      end
    end)
  end

  @doc """
  Loads a checkpoint as the nested containers it was saved from: a
  structure recorded by `save/3` or Python's `ckpt.save` (maps, lists,
  tuples, non-tensor values), a torch file's object tree (optimizer state,
  epochs, …), or else the names split at dots.  Tensors are
  `{binary, type, shape}`, or whatever `leaf: fn {binary, type, shape} -> … end`
  makes of them (e.g. `Nx.from_binary(bin, type) |> Nx.reshape(shape)`).
  `copy: true` copies instead of mapping; `check_crc: false` skips the ZIP
  CRC-32 check of members read whole, as in `load/2`.
  """
  @spec load_tree(source, keyword) :: {:ok, term} | {:error, Error.t()}
  def load_tree(source, opts \\ []) do
    opts = Keyword.validate!(opts, leaf: nil, copy: false, threads: 0, check_crc: true)
    Ckpt.Writer.flags!(opts, "Ckpt.load_tree", [:copy, :check_crc])

    with_catalog(source, fn c ->
      with {:ok, flat} <- load(c, copy: opts[:copy], threads: opts[:threads], check_crc: opts[:check_crc]) do
        flat = if opts[:leaf], do: Map.new(flat, fn {k, v} -> {k, opts[:leaf].(v)} end), else: flat
        structure = c.tree || metadata(c)[Tree.metadata_key()]

        try do
          tree =
            if structure do
              Tree.decode(structure, fn name ->
                case Map.fetch(flat, name) do
                  {:ok, v} -> v
                  :error -> raise ArgumentError, "it names a tensor '#{name}' the checkpoint does not hold"
                end
              end)
            else
              Tree.unflatten(flat)
            end

          {:ok, tree}
        rescue
          e ->
            what =
              cond do
                c.tree -> "its object tree is not a structure of its tensors"
                structure -> "its '#{Tree.metadata_key()}' metadata is not a structure of its tensors"
                true -> "its tensor names do not nest into containers"
              end

            {:error,
             %Error{
               status: :corrupt,
               code: 18,
               detail: :header_schema,
               detail_code: 25,
               path: c.path,
               message: "#{c.path}: #{what}: #{Exception.message(e)}"
             }}
        end
      end
    end)
  end

  @doc "Like `load_tree/2`, raising `Ckpt.Error`."
  def load_tree!(source, opts \\ []), do: bang(load_tree(source, opts))

  @doc """
  What is written at `path` — libckpt's destination rule, the one every
  entry point follows (`ckpt_destination_resolve`): a path ending in `/`
  or naming an existing directory is a directory (safetensors shards, or
  DCP's files); a name ending in `.safetensors`, `.gguf`, `.pt`/`.pth`/`.bin`
  (torch.save), `.npy`, `.npz` or `.msgpack` is that file (or, with
  `max_shard_size`, its split parts beside it); another checkpoint suffix
  (`.ckpt`, `.h5`, `.onnx`, an index, …) is refused (`:invalid_argument`);
  any other name is a directory.  Options as `Ckpt.Writer.create/2`
  (`format:` asks for a format).  Returns
  `{:ok, %{format: :torch, directory: false}}`; nothing is created.
  """
  def destination(path, opts \\ []) do
    opts = Keyword.validate!(opts, max_shard_size: nil, prefix: nil, format: nil, overwrite: false, no_sync: false, checksums: false)
    Ckpt.Writer.flags!(opts, "Ckpt.destination", [:overwrite, :no_sync, :checksums])

    with {:ok, limit} <- Ckpt.Writer.limit(opts[:max_shard_size]),
         {:ok, {name, directory}} <-
           Error.wrap(NIF.destination(IO.chardata_to_string(path), Ckpt.Writer.options(opts, limit))) do
      {:ok, %{format: Ckpt.Writer.format_atom(name), directory: directory}}
    end
  end

  @doc """
  Saves nested params — maps (string or integer keys), lists and tuples of
  `{binary, type, shape}` tensors and plain values — with flat dotted
  names, streamed from the binaries (nothing is concatenated) and
  committed atomically.  The container structure is recorded under
  the `ckpt.tree` metadata key (the Python package's schema), so
  `load_tree/2` — and Python's `ckpt.load(path, nested=True)` — give back
  the same containers; a flat map of plain names needs none.

  `path` says what is written (`destination/2`): `"x.safetensors"` is one
  file (or, with `max_shard_size`, its parts
  `x-00001-of-00003.safetensors` + `x.safetensors.index.json`); `"x.pt"`
  a torch.save file (no metadata: the structure is not kept), `"x.npy"`
  one array; `"out/"`, an existing directory or a name without a
  checkpoint suffix a directory of Hugging Face shards
  (`model-00001-of-00003.safetensors` + `model.safetensors.index.json`,
  or `model.safetensors` when everything fits in one).  Returns the paths
  written.

  Options: `max_shard_size:` (`nil`: 5 GB shards in a directory, one file
  for a file name; `"500MB"`, `"2GiB"` or bytes), `prefix:` (a directory's,
  `"model"`), `metadata:` (a map of strings, in the file or the index as
  huggingface_hub places it), `overwrite:` (default false: an existing
  checkpoint at `path` is an `:exists` error; true replaces it once the
  new files are complete, as Python's `ckpt.save` and the CLI's `--force`
  do), `checksums:` (record XXH3-64s for `verify/1`), `no_sync:`, and
  `leaf:` (a function turning structs such as `Nx.Tensor` into
  `{binary, type, shape}`).
  """
  @spec save(term, Path.t(), keyword) :: {:ok, [Path.t()]} | {:error, Error.t()}
  def save(params, path, opts \\ []) do
    opts =
      Keyword.validate!(opts,
        max_shard_size: nil,
        prefix: nil,
        metadata: %{},
        overwrite: false,
        checksums: false,
        no_sync: false,
        leaf: nil
      )

    Ckpt.Writer.flags!(opts, "Ckpt.save", [:overwrite, :checksums, :no_sync])
    path = IO.chardata_to_string(path)
    {entries, structure, plain?} = Tree.flatten(params, opts[:leaf])
    writer_opts = Keyword.take(opts, [:max_shard_size, :prefix, :overwrite, :no_sync, :checksums])

    with {:ok, dest} <- destination(path, writer_opts),
         {:ok, limit} <- Ckpt.Writer.limit(opts[:max_shard_size]),
         {:ok, w} <- Ckpt.Writer.create(path, writer_opts) do
      try do
        write_all(w, entries, structure, plain?, sharded?(dest, limit, entries), opts[:metadata])
      after
        Ckpt.Writer.abort(w)
      end
    end
  end

  # Whether the output may be cut in several files: a directory, or a
  # file's parts, past the shard size (a directory's default: the hub's).
  defp sharded?(%{directory: directory}, limit, entries) do
    total = Enum.reduce(entries, 0, fn {_, _, _, bin}, acc -> acc + byte_size(bin) end)
    limit = if limit == 0 and directory, do: 5_000_000_000, else: limit
    limit > 0 and total > limit and length(entries) > 1
  end

  defp write_all(w, entries, structure, plain?, sharded?, metadata) do
    with :ok <- each(metadata, fn {k, v} -> Ckpt.Writer.set_metadata(w, k, v, checkpoint: true) end),
         :ok <- record_structure(w, structure, plain?, sharded?),
         {:ok, indexes} <- map_ok(entries, fn {name, dtype, shape, _} -> Ckpt.Writer.add(w, name, dtype, shape) end),
         {:ok, _files} <- Ckpt.Writer.begin(w),
         :ok <- each(Enum.zip(indexes, entries), fn {i, {_, _, _, bin}} -> Ckpt.Writer.write(w, i, bin) end) do
      Ckpt.Writer.commit(w)
    end
  end

  # In the checkpoint's metadata (the index when sharded, as Python's
  # ckpt.save does) and, when the output will be sharded, in every shard's
  # own __metadata__ too: readers that see shards only (libckpt's catalog)
  # then restore it.
  defp record_structure(_w, _structure, true, _sharded?), do: :ok

  defp record_structure(w, structure, false, sharded?) do
    with :ok <- if(sharded?, do: Ckpt.Writer.set_metadata(w, Tree.metadata_key(), structure), else: :ok) do
      Ckpt.Writer.set_metadata(w, Tree.metadata_key(), structure, checkpoint: true)
    end
  end

  @doc "Like `save/3`, raising `Ckpt.Error`."
  def save!(params, path, opts \\ []), do: bang(save(params, path, opts))

  @doc """
  Converts any checkpoint ckpt reads to `dst`, which says what is written
  (`destination/2`: `"x.safetensors"`, `"x.pt"`, `"x.gguf"`, … a file;
  `"out/"` a directory of shards), streamed: memory does not grow with the
  model.  Takes `load/2`'s plan options (select, rename, cast, transpose,
  layout, …) to persist a converted layout once, and `save/3`'s
  `max_shard_size`, `prefix`, `overwrite` (default false here), `checksums`
  and `no_sync`, `format:` (`:dcp`, or a format the suffix does not
  say), and `check_crc: false` (do not check the source's ZIP CRC-32s,
  which by default fail a `:checksum` error before anything is published).
  """
  def convert(source, dst, opts \\ []) do
    {rules, rest} = rules(opts)

    rest =
      Keyword.validate!(rest,
        max_shard_size: nil,
        prefix: nil,
        format: nil,
        overwrite: false,
        checksums: false,
        no_sync: false,
        check_crc: true
      )

    Ckpt.Writer.flags!(rest, "Ckpt.convert", [:overwrite, :checksums, :no_sync, :check_crc])
    dst = IO.chardata_to_string(dst)

    with {:ok, limit} <- Ckpt.Writer.limit(rest[:max_shard_size]) do
      with_catalog(source, fn c ->
        Error.wrap(NIF.convert(c.ref, dst, rules, Ckpt.Writer.options(rest, limit)))
      end)
    end
  end

  @doc """
  Finishes a commit into directory `dir` that a crash cut short (a writer
  killed after deciding it, leaving `dir/.ckpt-commit.json`), as
  `ckpt recover DIR` and Python's `ckpt.recover` do: `{:ok, true}` when
  there was one, `{:ok, false}` when there was nothing to finish.  Opening
  the checkpoint never does it: `open/1` and `load/2` fail with an
  `:incomplete` error until this, or the next write into the directory,
  finishes it.

  The journal is executed only when it is provably one ckpt wrote (its
  stage a real directory inside `dir` named as ckpt names stages, only
  checkpoint files removed or published, never through a symlink);
  anything else is an `:incomplete` error naming the journal, the rule and
  the byte offset, and is left alone.  A directory a live writer holds is
  a `:locked` error naming its pid.  `check: true` only checks: nothing
  changes (and no lock is taken).
  """
  @spec recover(Path.t(), keyword) :: {:ok, boolean} | {:error, Error.t()}
  def recover(dir, opts \\ []) do
    opts = Keyword.validate!(opts, check: false) |> Ckpt.Writer.flags!("Ckpt.recover", [:check])
    Error.wrap(NIF.recover(IO.chardata_to_string(dir), opts[:check] == true))
  end

  @doc "Like `recover/2`, raising `Ckpt.Error`."
  def recover!(dir, opts \\ []), do: bang(recover(dir, opts))

  @doc "Re-reads every tensor that has a recorded checksum; `{:ok, count}` when all match."
  def verify(source) do
    with {:ok, report} <- verify_report(source), do: {:ok, report.tensor_digests}
  end

  @doc """
  Like `verify/1`, saying everything it checked: `{:ok, %{tensor_digests:,
  chunk_digests:, header_digests:, zip_crc32:, bytes:, tensors:,
  file_sha256:}}` — ckpt's XXH3-64 digests of tensors, of the 1 MiB chunks
  of tensors of at least 4 MiB (the empty last one included) and of
  headers, the CRC-32s of ZIP members (torch
  files, `.npz`), the bytes and tensors they cover (zeros when the files
  record none), and the files whose SHA-256 their source states (an hf://
  repo's LFS files).
  """
  def verify_report(source), do: with_catalog(source, &Error.wrap(NIF.verify(&1.ref)))

  @doc ~S{Parses a shard size: "5GB" (powers of 1000, as huggingface_hub), "2GiB", or bytes.}
  def parse_size(text) when is_binary(text), do: Error.wrap(NIF.parse_size(text))


  # ---- helpers

  defp with_catalog(%Catalog{} = c, fun), do: fun.(c)

  defp with_catalog(path, fun) when is_binary(path) or is_list(path) do
    with {:ok, c} <- open(path), do: fun.(c)
  end

  # A load's io: opens a path so; a catalog reads as it was opened.
  defp with_catalog(source, nil, fun), do: with_catalog(source, fun)

  defp with_catalog(%Catalog{}, _io, _fun) do
    raise ArgumentError, "io: is how a catalog reads its files: give it to Ckpt.open/2, not to a load of an opened catalog"
  end

  defp with_catalog(path, io, fun) when is_binary(path) or is_list(path) do
    with {:ok, c} <- open(path, io: io), do: fun.(c)
  end

  defp io_mode(io) do
    %{auto: 0, buffered: 1, direct: 2}[io] || raise ArgumentError, "io: must be :auto, :buffered or :direct"
  end

  defp with_catalog!(source, fun) do
    case source do
      %Catalog{} = c -> fun.(c)
      path -> fun.(open!(path))
    end
  end

  defp bang({:ok, v}), do: v
  defp bang(:ok), do: :ok
  defp bang({:error, %Error{} = e}), do: raise(e)

  defp each(enum, fun) do
    Enum.reduce_while(enum, :ok, fn x, :ok ->
      case fun.(x) do
        :ok -> {:cont, :ok}
        error -> {:halt, error}
      end
    end)
  end

  defp map_ok(enum, fun) do
    enum
    |> Enum.reduce_while({:ok, []}, fn x, {:ok, acc} ->
      case fun.(x) do
        {:ok, v} -> {:cont, {:ok, [v | acc]}}
        error -> {:halt, error}
      end
    end)
    |> case do
      {:ok, list} -> {:ok, Enum.reverse(list)}
      error -> error
    end
  end

  @rule_keys [:select, :exclude, :rename, :cast, :transpose, :layout, :permute, :slice, :split]

  # Plan options → the NIF's rule tuples, in the order given.
  defp rules(opts) do
    {rules, rest} = Enum.split_with(opts, fn {k, _} -> k in @rule_keys end)
    unknown = Keyword.keys(rest) -- (@load_opts ++ [:max_shard_size, :prefix, :format, :overwrite, :checksums, :no_sync])
    if unknown != [], do: raise(ArgumentError, "unknown options #{inspect(unknown)}")
    {Enum.flat_map(rules, &rule/1), rest}
  end

  defp rule({k, list}) when k in [:select, :exclude, :transpose] and is_list(list),
    do: Enum.map(list, &{k, pattern!(&1)})

  defp rule({k, p}) when k in [:select, :exclude, :transpose], do: [{k, pattern!(p)}]
  defp rule({:rename, m}) when is_map(m), do: Enum.map(m, fn {f, t} -> {:rename, text!(f), text!(t)} end)
  defp rule({:rename, {f, t}}), do: [{:rename, text!(f), text!(t)}]
  defp rule({:rename, list}) when is_list(list), do: Enum.flat_map(list, &rule({:rename, &1}))
  defp rule({:cast, list}) when is_list(list), do: Enum.flat_map(list, &rule({:cast, &1}))

  defp rule({:cast, {p, type}}) when is_binary(p) or is_nil(p), do: [{:cast, p, dtype!(type)}]
  defp rule({:cast, type}), do: [{:cast, nil, dtype!(type)}]
  defp rule({:layout, list}) when is_list(list), do: Enum.flat_map(list, &rule({:layout, &1}))
  defp rule({:layout, {p, spec}}) when is_binary(spec), do: [layout(p, spec)]
  defp rule({:layout, {from, to}}) when is_binary(from) and is_binary(to), do: [{:layout, nil, from, to}]
  defp rule({:layout, spec}) when is_binary(spec), do: [layout(nil, spec)]
  defp rule({:permute, list}) when is_list(list), do: Enum.flat_map(list, &rule({:permute, &1}))
  defp rule({:permute, {p, perm}}) when is_list(perm), do: [{:permute, pattern!(p), perm}]
  defp rule({:slice, list}) when is_list(list), do: Enum.flat_map(list, &rule({:slice, &1}))

  defp rule({:slice, {p, dim, %Range{first: a, last: b, step: 1}}}),
    do: [{:slice, pattern!(p), dim, a, b + 1}]

  defp rule({:slice, {p, dim, start, stop}}), do: [{:slice, pattern!(p), dim, start, stop}]
  defp rule({:split, list}) when is_list(list), do: Enum.flat_map(list, &rule({:split, &1}))
  defp rule({:split, {p, dim, rank, parts}}), do: [{:split, pattern!(p), dim, rank, parts}]
  defp rule(other), do: raise(ArgumentError, "cannot read the plan option #{inspect(other)}")

  defp layout(p, spec) do
    case String.split(spec, ":") do
      [from, to] -> {:layout, pattern!(p), from, to}
      _ -> raise ArgumentError, ~s(layout #{inspect(spec)}: expected "FROM:TO", e.g. "OIHW:HWIO")
    end
  end

  defp pattern!(nil), do: nil
  defp pattern!(p), do: text!(p)

  defp text!(s) when is_binary(s), do: s
  defp text!(other), do: raise(ArgumentError, "expected a string, got #{inspect(other)}")

  defp dtype!(type), do: Types.to_dtype(type) || raise(ArgumentError, "unknown type #{inspect(type)}")
end
