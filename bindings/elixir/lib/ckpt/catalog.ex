defmodule Ckpt.Catalog do
  @moduledoc """
  An opened checkpoint (`Ckpt.open/1`): `format` (`:safetensors`,
  `:safetensors_sharded`, `:torch`, `:torch_sharded`, `:npy`, `:npz`,
  `:flax_msgpack`), its data `files` as
  `{path, size}`, the `index_path` of a sharded one, the number of tensors
  (`count`) and a torch file's object tree (`tree`: built by the NIF from
  libckpt's values, no JSON text, in the shape `Ckpt.JSON` decodes the
  schema of `ckpt_catalog_tree_json` to — `{:obj, [{key, value}]}`
  objects — which `Ckpt.Tree.decode/2` rebuilds).  `path` is the name
  opened as it may be shown: a URL without its user part (`REDACTED@`) or
  the query values that carry credentials (libckpt's `ckpt_redact_name`).  `ref` is the
  libckpt catalog, closed by the garbage collector once neither this struct
  nor any zero-copy binary of it is referenced.
  """
  defstruct [:ref, :path, :format, :files, :index_path, :tree, :count]

  @type t :: %__MODULE__{}

  defimpl Inspect do
    def inspect(c, _opts),
      do: "#Ckpt.Catalog<#{c.path} #{c.format}, #{c.count} tensors in #{length(c.files)} file(s)>"
  end
end
