defmodule Ckpt.Writer do
  @moduledoc """
  libckpt's streaming writer (safetensors, torch.save, NumPy, GGUF, …), for
  data that does not sit in memory at once (e.g. converting a model shard
  by shard):

      {:ok, w} = Ckpt.Writer.create("out/", max_shard_size: "5GB")
      {:ok, i} = Ckpt.Writer.add(w, "embed.weight", {:bf, 16}, {32000, 4096})
      {:ok, files} = Ckpt.Writer.begin(w)      # layout, headers, space reserved
      :ok = Ckpt.Writer.write(w, i, chunk)      # a tensor's bytes in order, any chunk size
      {:ok, paths} = Ckpt.Writer.commit(w)      # fsync, rename into place, index last

  Nothing appears under a final name before `commit/1`; `abort/1` (or the
  garbage collector, for a writer no longer referenced) removes the
  temporaries.  Calls on one writer from several processes are serialised.
  """
  alias Ckpt.{Error, NIF, Types}

  defstruct [:ref, :path, :prefix]
  @type t :: %__MODULE__{}

  @doc """
  A writer for `path`, which says what is written (`Ckpt.destination/2`):
  `"x.safetensors"`, `"x.pt"`, `"x.npy"`, … one file of that format;
  `"out/"`, an existing directory or a name without a checkpoint suffix, a
  directory of Hugging Face shards.  Options: `max_shard_size:` (`"5GB"`
  or an integer: shards of a directory — `nil`, the default, is the hub's
  5 GB there — or a `.safetensors` file's parts beside it; `nil`: one
  file), `prefix:` (a directory's file prefix, `"model"` when `nil`),
  `format:` (`:gguf`, `:dcp`, … when the path does not say it; it must
  agree with the suffix), `overwrite:` (false), `no_sync:`, `checksums:`.
  """
  def create(path, opts \\ []) do
    opts =
      Keyword.validate!(opts,
        max_shard_size: nil,
        prefix: nil,
        format: nil,
        overwrite: false,
        no_sync: false,
        checksums: false
      )

    flags!(opts, "Ckpt.Writer.create", [:overwrite, :no_sync, :checksums])
    path = IO.chardata_to_string(path)

    with {:ok, limit} <- limit(opts[:max_shard_size]),
         {:ok, ref} <- Error.wrap(NIF.writer_create(path, options(opts, limit))) do
      {:ok, %__MODULE__{ref: ref, path: path, prefix: opts[:prefix] || "model"}}
    end
  end

  @doc false
  def limit(nil), do: {:ok, 0}
  def limit(n) when is_integer(n) and n >= 0, do: {:ok, n}
  def limit(text) when is_binary(text), do: Ckpt.parse_size(text)

  # A boolean option is true or false: `opts[:overwrite] == true` made
  # `overwrite: "yes"` false and `check_crc != false` made `check_crc: "no"`
  # true, silently.  Anything else raises, naming the function and the option.
  @doc false
  def flags!(opts, where, keys) do
    for key <- keys, Keyword.has_key?(opts, key), not is_boolean(opts[key]) do
      raise ArgumentError, "#{where}: #{key} must be a boolean, not #{inspect(opts[key])}"
    end

    opts
  end

  # Formats as atoms (:flax_msgpack), and as libckpt names them ("flax-msgpack").
  @doc false
  def options(opts, limit) do
    format = if f = opts[:format], do: f |> Atom.to_string() |> String.replace("_", "-")
    {limit, opts[:prefix], opts[:overwrite] == true, opts[:no_sync] == true, opts[:checksums] == true, format,
     opts[:check_crc] != false}
  end

  @doc false
  def format_atom(name), do: name |> String.replace("-", "_") |> String.to_atom()

  @doc """
  A `__metadata__` entry of every file; with `checkpoint: true`, of the
  checkpoint instead (the file's, or the index's when sharded).
  """
  def set_metadata(%__MODULE__{ref: ref}, key, value, opts \\ []) when is_binary(key) and is_binary(value) do
    flags!(opts, "Ckpt.Writer.set_metadata", [:checkpoint])
    Error.wrap(NIF.writer_set_metadata(ref, key, value, Keyword.get(opts, :checkpoint, false)))
  end

  @doc "Declares a tensor (type: see `Ckpt.Types`; shape a tuple); returns its index."
  def add(%__MODULE__{ref: ref}, name, type, shape) when is_binary(name) do
    dtype = Types.to_dtype(type) || raise ArgumentError, "unknown type #{inspect(type)}"
    shape = if is_tuple(shape), do: Tuple.to_list(shape), else: shape
    Error.wrap(NIF.writer_add(ref, name, dtype, shape))
  end

  @doc "Ends declarations; returns the final paths of the data files."
  def begin(%__MODULE__{ref: ref}), do: Error.wrap(NIF.writer_begin(ref))

  @doc "Appends the next bytes of tensor `index` (a binary, or iodata written piece by piece)."
  def write(%__MODULE__{ref: ref}, index, data) when is_binary(data) do
    # Pieces of at most 64 MiB (sub-binaries, no copy) keep each dirty call short.
    piece = 64 * 1024 * 1024
    write_pieces(ref, index, data, 0, byte_size(data), piece)
  end

  def write(%__MODULE__{} = w, index, iodata) when is_list(iodata) do
    Enum.reduce_while(List.flatten(iodata), :ok, fn part, :ok ->
      case write(w, index, if(is_integer(part), do: <<part>>, else: part)) do
        :ok -> {:cont, :ok}
        error -> {:halt, error}
      end
    end)
  end

  defp write_pieces(ref, index, data, at, size, piece) when at < size or size == 0 do
    n = min(piece, size - at)

    case Error.wrap(NIF.writer_write(ref, index, binary_part(data, at, n))) do
      :ok when at + n < size -> write_pieces(ref, index, data, at + n, size, piece)
      other -> other
    end
  end

  @doc """
  Checks every tensor is complete, fsyncs and renames into place (index
  last); returns every path published: the data files, then the index.
  """
  def commit(%__MODULE__{ref: ref}), do: Error.wrap(NIF.writer_commit(ref))

  @doc "Drops an uncommitted writer now, removing its temporaries (no-op after commit)."
  def abort(%__MODULE__{ref: ref}), do: NIF.writer_abort(ref)
end
