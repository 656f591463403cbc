defmodule Ckpt.Error do
  @moduledoc """
  A failure reported by libckpt: its `status` (an atom such as `:data_hole`
  for `CKPT_E_DATA_HOLE`), the stable numeric `code`, and where it applies —
  the file (`path`), the `tensor` and the byte `offset` in that file (each
  `nil` when it does not apply) — plus `errno` of a failed system call and
  libckpt's sentence naming all of them (`message`).
  """
  defexception [:status, :code, :path, :tensor, :offset, :errno, :message]

  @impl true
  def message(%__MODULE__{message: m, status: s}),
    do: "#{m} [CKPT_E_#{s |> Atom.to_string() |> String.upcase()}]"

  @doc false
  def from_nif({status, code, path, tensor, offset, errno, message}),
    do: %__MODULE__{
      status: status,
      code: code,
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
