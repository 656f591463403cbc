defmodule Ckpt.JSON do
  @moduledoc false
  # A small JSON codec for the `ckpt.tree` structure and torch object trees
  # (Erlang 25 has no JSON module and no hex package may be fetched).
  #
  # Objects decode to {:obj, [{key, value}]} (keys in order, duplicates
  # kept); encode takes the same, lists, binaries (UTF-8), integers,
  # finite floats, true, false and nil.  Encoding matches Python's
  # json.dumps(x, separators=(",", ":")): non-ASCII escaped as \uXXXX
  # (surrogate pairs beyond the BMP), floats as Python's repr.

  # ---- encode

  def encode(term), do: IO.iodata_to_binary(enc(term))

  defp enc(nil), do: "null"
  defp enc(true), do: "true"
  defp enc(false), do: "false"
  defp enc(n) when is_integer(n), do: Integer.to_string(n)
  defp enc(f) when is_float(f), do: py_float(f)
  defp enc(s) when is_binary(s), do: [?", escape(s, []), ?"]
  defp enc(list) when is_list(list), do: [?[, Enum.map_intersperse(list, ?,, &enc/1), ?]]

  defp enc({:obj, pairs}),
    do: [?{, Enum.map_intersperse(pairs, ?,, fn {k, v} -> [enc(k), ?:, enc(v)] end), ?}]

  defp escape(<<>>, acc), do: Enum.reverse(acc)
  defp escape(<<?", rest::binary>>, acc), do: escape(rest, ["\\\"" | acc])
  defp escape(<<?\\, rest::binary>>, acc), do: escape(rest, ["\\\\" | acc])
  defp escape(<<?\n, rest::binary>>, acc), do: escape(rest, ["\\n" | acc])
  defp escape(<<?\r, rest::binary>>, acc), do: escape(rest, ["\\r" | acc])
  defp escape(<<?\t, rest::binary>>, acc), do: escape(rest, ["\\t" | acc])
  defp escape(<<?\b, rest::binary>>, acc), do: escape(rest, ["\\b" | acc])
  defp escape(<<?\f, rest::binary>>, acc), do: escape(rest, ["\\f" | acc])
  defp escape(<<c, rest::binary>>, acc) when c < 0x20 or c == 0x7F, do: escape(rest, [u4(c) | acc])
  defp escape(<<c, rest::binary>>, acc) when c < 0x80, do: escape(rest, [c | acc])

  defp escape(<<c::utf8, rest::binary>>, acc) when c > 0xFFFF do
    v = c - 0x10000
    escape(rest, [u4(0xDC00 + Bitwise.band(v, 0x3FF)), u4(0xD800 + Bitwise.bsr(v, 10)) | acc])
  end

  defp escape(<<c::utf8, rest::binary>>, acc), do: escape(rest, [u4(c) | acc])

  defp escape(<<_, _::binary>>, _acc),
    do: raise(ArgumentError, "strings in a checkpoint's structure must be valid UTF-8")

  defp u4(c), do: "\\u" <> String.pad_leading(String.downcase(Integer.to_string(c, 16)), 4, "0")

  # Python's repr(float): the shortest digits that round-trip, positional
  # for 1e-4 <= |x| < 1e16, else d.ddde±XX.
  defp py_float(f) do
    {digits, exp} = shortest(f)
    sign = if f < 0 or (f == 0.0 and <<f::float>> == <<-0.0::float>>), do: "-", else: ""
    n = byte_size(digits)
    # value = 0.digits × 10^exp
    point = exp

    body =
      cond do
        point > 16 or point < -3 ->
          mant = if n == 1, do: digits, else: binary_part(digits, 0, 1) <> "." <> binary_part(digits, 1, n - 1)
          e = point - 1
          mant <> "e" <> if(e < 0, do: "-", else: "+") <> String.pad_leading(Integer.to_string(abs(e)), 2, "0")

        point <= 0 ->
          "0." <> String.duplicate("0", -point) <> digits

        point >= n ->
          digits <> String.duplicate("0", point - n) <> ".0"

        true ->
          binary_part(digits, 0, point) <> "." <> binary_part(digits, point, n - point)
      end

    sign <> body
  end

  # {"ddd", e}: |f| = 0.ddd × 10^e, ddd the shortest round-trip digits.
  defp shortest(f) do
    text = f |> :erlang.float_to_binary([:short]) |> String.trim_leading("-")

    {mant, exp} =
      case String.split(text, ["e", "E"]) do
        [m, e] -> {m, String.to_integer(e)}
        [m] -> {m, 0}
      end

    {int, frac} =
      case String.split(mant, ".") do
        [i, fr] -> {i, fr}
        [i] -> {i, ""}
      end

    all = int <> frac
    lead = byte_size(all) - byte_size(String.trim_leading(all, "0"))
    digits = all |> String.trim_leading("0") |> String.trim_trailing("0")

    if digits == "" do
      {"0", 1}
    else
      {digits, byte_size(int) - lead + exp}
    end
  end

  # ---- decode

  @max_depth 1000

  def decode(text) when is_binary(text) do
    {value, rest} = value(skip(text), 0)

    case skip(rest) do
      "" -> {:ok, value}
      other -> {:error, "unexpected #{inspect(String.slice(other, 0, 20))} after the JSON value"}
    end
  catch
    {:json, why} -> {:error, why}
  end

  defp skip(<<c, rest::binary>>) when c in [?\s, ?\t, ?\n, ?\r], do: skip(rest)
  defp skip(s), do: s

  defp value(_, depth) when depth > @max_depth, do: throw({:json, "nested deeper than #{@max_depth} levels"})
  defp value(<<?{, rest::binary>>, d), do: object(skip(rest), [], d + 1)
  defp value(<<?[, rest::binary>>, d), do: array(skip(rest), [], d + 1)
  defp value(<<?", rest::binary>>, _), do: string(rest, [])
  defp value(<<"true", rest::binary>>, _), do: {true, rest}
  defp value(<<"false", rest::binary>>, _), do: {false, rest}
  defp value(<<"null", rest::binary>>, _), do: {nil, rest}
  defp value(<<"NaN", rest::binary>>, _), do: {:nan, rest}
  defp value(<<"Infinity", rest::binary>>, _), do: {:infinity, rest}
  defp value(<<"-Infinity", rest::binary>>, _), do: {:neg_infinity, rest}
  defp value(<<c, _::binary>> = s, _) when c == ?- or c in ?0..?9, do: number(s)
  defp value(s, _), do: throw({:json, "unexpected #{inspect(String.slice(s, 0, 20))}"})

  defp object(<<?}, rest::binary>>, [], _), do: {{:obj, []}, rest}

  defp object(<<?", rest::binary>>, acc, d) do
    {key, rest} = string(rest, [])

    case skip(rest) do
      <<?:, rest::binary>> ->
        {v, rest} = value(skip(rest), d)

        case skip(rest) do
          <<?,, rest::binary>> -> object(skip(rest), [{key, v} | acc], d)
          <<?}, rest::binary>> -> {{:obj, Enum.reverse([{key, v} | acc])}, rest}
          _ -> throw({:json, "expected , or } in an object"})
        end

      _ ->
        throw({:json, "expected : after an object key"})
    end
  end

  defp object(_, _, _), do: throw({:json, "expected a string key"})

  defp array(<<?], rest::binary>>, [], _), do: {[], rest}

  defp array(s, acc, d) do
    {v, rest} = value(s, d)

    case skip(rest) do
      <<?,, rest::binary>> -> array(skip(rest), [v | acc], d)
      <<?], rest::binary>> -> {Enum.reverse([v | acc]), rest}
      _ -> throw({:json, "expected , or ] in an array"})
    end
  end

  defp string(<<?", rest::binary>>, acc), do: {IO.iodata_to_binary(Enum.reverse(acc)), rest}

  defp string(<<?\\, c, rest::binary>>, acc) when c in [?", ?\\, ?/],
    do: string(rest, [c | acc])

  defp string(<<"\\n", rest::binary>>, acc), do: string(rest, [?\n | acc])
  defp string(<<"\\t", rest::binary>>, acc), do: string(rest, [?\t | acc])
  defp string(<<"\\r", rest::binary>>, acc), do: string(rest, [?\r | acc])
  defp string(<<"\\b", rest::binary>>, acc), do: string(rest, [?\b | acc])
  defp string(<<"\\f", rest::binary>>, acc), do: string(rest, [?\f | acc])

  defp string(<<"\\u", a::binary-4, "\\u", b::binary-4, rest::binary>>, acc)
       when binary_part(a, 0, 1) in ["d", "D"] do
    hi = String.to_integer(a, 16)
    lo = String.to_integer(b, 16)

    if hi in 0xD800..0xDBFF and lo in 0xDC00..0xDFFF do
      c = 0x10000 + Bitwise.bsl(hi - 0xD800, 10) + (lo - 0xDC00)
      string(rest, [<<c::utf8>> | acc])
    else
      throw({:json, "invalid surrogate pair"})
    end
  end

  defp string(<<"\\u", a::binary-4, rest::binary>>, acc) do
    case Integer.parse(a, 16) do
      {c, ""} when c not in 0xD800..0xDFFF -> string(rest, [<<c::utf8>> | acc])
      _ -> throw({:json, "invalid \\u escape"})
    end
  end

  defp string(<<c, rest::binary>>, acc) when c >= 0x20 and c != ?\\, do: string(rest, [c | acc])
  defp string(_, _), do: throw({:json, "unterminated or invalid string"})

  defp number(s) do
    {text, rest} = take_number(s, [])
    if byte_size(text) > 400, do: throw({:json, "a number of #{byte_size(text)} characters"})

    cond do
      String.contains?(text, [".", "e", "E"]) ->
        {to_float(text), rest}

      true ->
        {String.to_integer(text), rest}
    end
  end

  defp take_number(<<c, rest::binary>>, acc) when c in ?0..?9 or c in [?-, ?+, ?., ?e, ?E],
    do: take_number(rest, [c | acc])

  defp take_number(rest, acc), do: {acc |> Enum.reverse() |> IO.iodata_to_binary(), rest}

  # Erlang wants d.d[e±d]: "1e+300" → "1.0e+300", "5." → "5.0".
  defp to_float(text) do
    [mant | exp] = String.split(text, ["e", "E"])

    mant =
      cond do
        not String.contains?(mant, ".") -> mant <> ".0"
        String.ends_with?(mant, ".") -> mant <> "0"
        true -> mant
      end

    mant = String.replace(mant, ~r/^(-?)\./, "\\g{1}0.")
    norm = if exp == [], do: mant, else: mant <> "e" <> hd(exp)

    try do
      :erlang.binary_to_float(norm)
    rescue
      ArgumentError -> throw({:json, "invalid number #{text}"})
    end
  end
end
