defmodule Ckpt.Types do
  @moduledoc """
  Element types.  libckpt names dtypes as safetensors does (`"F32"`,
  `"BF16"`, `"F8_E4M3"`, …).  Tensors are given and returned with Nx's
  types where Nx has one:

  | dtype | type | | dtype | type |
  |---|---|---|---|---|
  | F64 | `{:f, 64}` | | I64 | `{:s, 64}` |
  | F32 | `{:f, 32}` | | I32 | `{:s, 32}` |
  | F16 | `{:f, 16}` | | I16 | `{:s, 16}` |
  | BF16 | `{:bf, 16}` | | I8 | `{:s, 8}` |
  | F8_E5M2 | `{:f, 8}` | | U64, U32, U16, U8 | `{:u, 64}` … `{:u, 8}` |
  | F8_E4M3 | `{:f8_e4m3fn, 8}` | | C64 | `{:c, 64}` |

  BOOL is returned as `{:u, 8}` (Nx has no boolean type); to write a BOOL
  tensor give its type as `"BOOL"`.  dtypes Nx lacks (F8_E8M0, the *FNUZ
  float8s, F4, F6_*) are given and returned as their name.  Anywhere a
  type is taken, a dtype name (any case) or an Nx shorthand atom (`:f32`,
  `:bf16`, `:s64`, …) works too.
  """

  @typedoc "An Nx type such as `{:f, 32}`, or a dtype name such as `\"F8_E8M0\"`."
  @type type :: {atom, pos_integer} | String.t() | atom

  @to_nx %{
    "F64" => {:f, 64},
    "F32" => {:f, 32},
    "F16" => {:f, 16},
    "BF16" => {:bf, 16},
    "F8_E5M2" => {:f, 8},
    "F8_E4M3" => {:f8_e4m3fn, 8},
    "I64" => {:s, 64},
    "I32" => {:s, 32},
    "I16" => {:s, 16},
    "I8" => {:s, 8},
    "U64" => {:u, 64},
    "U32" => {:u, 32},
    "U16" => {:u, 16},
    "U8" => {:u, 8},
    "BOOL" => {:u, 8},
    "C64" => {:c, 64}
  }
  @from_nx @to_nx |> Map.delete("BOOL") |> Map.new(fn {d, t} -> {t, d} end)

  @doc "The Nx type of a dtype, or the dtype name itself when Nx has none."
  def to_type(dtype) when is_binary(dtype), do: Map.get(@to_nx, dtype, dtype)

  @doc "The dtype name of an Nx type, shorthand atom or dtype name; nil if unknown."
  def to_dtype(type) when is_tuple(type), do: Map.get(@from_nx, type)

  def to_dtype(type) when is_atom(type) and type not in [nil, true, false] do
    case Regex.run(~r/^(f8_e4m3fn|bf|f|s|u|c)(\d+)$/, Atom.to_string(type)) do
      [_, "f8_e4m3fn", "8"] -> "F8_E4M3"
      [_, kind, bits] -> to_dtype({String.to_atom(kind), String.to_integer(bits)})
      _ -> nil
    end
  end

  def to_dtype(type) when is_binary(type) do
    name = String.upcase(type)
    if Ckpt.NIF.dtype_bits(name) > 0, do: name
  end

  def to_dtype(_), do: nil

  @doc "Bits per element of a dtype name (0 for an unknown one)."
  def bits(dtype), do: Ckpt.NIF.dtype_bits(dtype)
end
