defmodule Ckpt.Error do
  @moduledoc """
  A failure reported by libckpt: its `status` (an atom such as `:corrupt`
  for `CKPT_E_CORRUPT`: what to act on), the stable numeric `code`, its
  `detail` (the rule that broke, such as `:data_hole` for
  `CKPT_D_DATA_HOLE`, or `nil`) and `detail_code`, and where it applies —
  the file (`path`), the `tensor` and the byte `offset` in that file (each
  `nil` when it does not apply) — plus `errno` of a failed system call and
  libckpt's sentence naming all of them (`message`).
  """
  defexception [:status, :code, :path, :tensor, :offset, :errno, :message, detail: nil, detail_code: 0]

  @impl true
  def message(%__MODULE__{message: m} = e), do: "#{m} [#{name(e)}]"

  @doc """
  The status and, where there is one, the detail, as libckpt's names:
  `"CKPT_E_CORRUPT/CKPT_D_DATA_HOLE"`, `"CKPT_E_NOT_FOUND"`.
  """
  def name(%__MODULE__{status: s, detail: nil}), do: "CKPT_E_" <> upcase(s)
  def name(%__MODULE__{status: s, detail: d}), do: "CKPT_E_" <> upcase(s) <> "/CKPT_D_" <> upcase(d)

  defp upcase(atom), do: atom |> Atom.to_string() |> String.upcase()

  @doc false
  def from_nif({status, code, detail, detail_code, path, tensor, offset, errno, message}),
    do: %__MODULE__{
      status: status,
      code: code,
      detail: detail,
      detail_code: detail_code,
      path: path,
      tensor: tensor,
      offset: offset,
      errno: errno,
      message: message
    }

  @doc false
  def wrap({:error, raw}) when is_tuple(raw), do: {:error, from_nif(raw)}
  def wrap(other), do: other
end

defmodule Ckpt.Call do
  @moduledoc """
  An object of a torch file's tree that is neither a container nor a
  tensor (e.g. `collections.OrderedDict` subclasses, `torch.Size`): the
  allowed global's dotted `name` and its constructor `args`.
  """
  defstruct [:name, args: []]
end
