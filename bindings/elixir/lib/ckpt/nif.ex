defmodule Ckpt.NIF do
  @moduledoc false
  # libckpt's NIF (c_src/ckpt_nif.c).  File I/O runs on dirty I/O
  # schedulers; catalogs, writers and loaded buffers are resources released
  # by the garbage collector.
  @on_load :load_nif

  def load_nif do
    path = :filename.join(:code.priv_dir(:ckpt), ~c"ckpt_nif")
    :erlang.load_nif(path, 0)
  end

  def open(_path, _io), do: :erlang.nif_error(:not_loaded)
  def info(_catalog), do: :erlang.nif_error(:not_loaded)
  def tensors(_catalog), do: :erlang.nif_error(:not_loaded)
  def metadata(_catalog), do: :erlang.nif_error(:not_loaded)
  def read(_catalog, _name, _copy), do: :erlang.nif_error(:not_loaded)
  def plan(_catalog, _rules), do: :erlang.nif_error(:not_loaded)
  def load(_catalog, _rules, _options), do: :erlang.nif_error(:not_loaded)
  def destination(_path, _options), do: :erlang.nif_error(:not_loaded)
  def writer_create(_path, _options), do: :erlang.nif_error(:not_loaded)
  def writer_set_metadata(_writer, _key, _value, _checkpoint), do: :erlang.nif_error(:not_loaded)
  def writer_add(_writer, _name, _dtype, _shape), do: :erlang.nif_error(:not_loaded)
  def writer_begin(_writer), do: :erlang.nif_error(:not_loaded)
  def writer_write(_writer, _index, _binary), do: :erlang.nif_error(:not_loaded)
  def writer_commit(_writer), do: :erlang.nif_error(:not_loaded)
  def writer_abort(_writer), do: :erlang.nif_error(:not_loaded)
  def convert(_catalog, _dst, _rules, _options), do: :erlang.nif_error(:not_loaded)
  def verify(_catalog), do: :erlang.nif_error(:not_loaded)
  def recover(_dir, _check), do: :erlang.nif_error(:not_loaded)
  def parse_size(_text), do: :erlang.nif_error(:not_loaded)
  def redact_name(_name), do: :erlang.nif_error(:not_loaded)
  def dtype_bits(_name), do: :erlang.nif_error(:not_loaded)
  def version, do: :erlang.nif_error(:not_loaded)
end
