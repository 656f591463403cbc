defmodule Ckpt.Tree do
  @moduledoc """
  Nested containers ↔ flat tensor names, in the schema of the Python
  package (`ckpt.flatten` / `ckpt.unflatten`, the `ckpt.tree` metadata key)
  and of libckpt's torch object trees.

  Names join map keys and list/tuple indexes with dots
  (`"layers.0.attn.weight"`).  The structure is JSON: a map is
  `{"__dict__": [[key, value], …]}` (string or integer keys, in Elixir's
  term order), a tuple `{"__tuple__": […]}`, a list a JSON array, each
  tensor `{"__tensor__": name}`; non-tensor leaves (`nil`, booleans,
  integers, floats, strings, and `:nan` / `:infinity` / `:neg_infinity`)
  are kept as they are, so the same containers come back.

  A tensor leaf is `{binary, type, shape}` (see `Ckpt.Types`), or any
  struct when a `:leaf` function turns it into one — e.g. for Nx:

      leaf: fn %Nx.Tensor{} = t -> {Nx.to_binary(t), Nx.type(t), Nx.shape(t)} end
  """

  @key "ckpt.tree"
  @doc false
  def metadata_key, do: @key

  @doc """
  Flattens a tree: `{[{name, dtype, shape, binary}], structure_json, plain?}`
  with tensors in walk order (map keys sorted).  `plain?` is true when the
  tree is a flat map of string keys (no dots, not all indexes) to tensors,
  which unflattens to itself without a recorded structure.  Raises
  `ArgumentError` naming the place of anything that is not a container or
  a leaf.
  """
  def flatten(tree, leaf \\ nil) do
    {structure, acc} = walk(tree, "", leaf, {[], MapSet.new()})
    {entries, _} = acc
    entries = Enum.reverse(entries)
    {entries, Ckpt.JSON.encode(structure), plain?(tree, entries)}
  end

  # Every key names a tensor of its own (a nested map holding one tensor
  # beside plain values has as many entries as keys, and is not plain).
  defp plain?(tree, entries) when is_map(tree) and not is_struct(tree) do
    keys = Map.keys(tree)
    names = MapSet.new(entries, &elem(&1, 0))

    length(entries) == map_size(tree) and
      Enum.all?(keys, &(is_binary(&1) and not String.contains?(&1, ".") and MapSet.member?(names, &1))) and
      not index_keys?(keys)
  end

  defp plain?(_, _), do: false

  defp index_keys?([]), do: false

  defp index_keys?(keys) do
    Enum.all?(keys, &(is_binary(&1) and &1 =~ ~r/^(0|[1-9][0-9]*)$/)) and
      Enum.sort(Enum.map(keys, &String.to_integer/1)) == Enum.to_list(0..(length(keys) - 1))
  end

  defp join("", k), do: to_string(k)
  defp join(prefix, k), do: prefix <> "." <> to_string(k)

  defp walk(x, prefix, leaf, acc) do
    case tensor(x, prefix, leaf) do
      {:ok, entry} ->
        {entries, seen} = acc

        if MapSet.member?(seen, prefix),
          do: raise(ArgumentError, "two entries flatten to the name #{inspect(prefix)}")

        {{:obj, [{"__tensor__", prefix}]}, {[entry | entries], MapSet.put(seen, prefix)}}

      :no ->
        container(x, prefix, leaf, acc)
    end
  end

  defp container(x, prefix, leaf, acc) when is_map(x) and not is_struct(x) do
    keys = Enum.sort(Map.keys(x))

    {items, acc} =
      Enum.map_reduce(keys, acc, fn k, acc ->
        unless is_binary(k) or is_integer(k) do
          raise ArgumentError,
                "map key #{inspect(k)} at #{where(prefix)}: only string and integer keys have names " <>
                  "(atom keys would come back as strings)"
        end

        if is_binary(k) and not String.valid?(k),
          do: raise(ArgumentError, "map key #{inspect(k)} at #{where(prefix)} is not UTF-8")

        {v, acc} = walk(Map.fetch!(x, k), join(prefix, k), leaf, acc)
        {[k, v], acc}
      end)

    {{:obj, [{"__dict__", items}]}, acc}
  end

  defp container(x, prefix, leaf, acc) when is_tuple(x) do
    {items, acc} = x |> Tuple.to_list() |> index(prefix, leaf, acc)
    {{:obj, [{"__tuple__", items}]}, acc}
  end

  defp container(x, prefix, leaf, acc) when is_list(x), do: index(x, prefix, leaf, acc)

  defp container(x, _prefix, _leaf, acc) when is_nil(x) or is_boolean(x) or is_number(x), do: {x, acc}

  defp container(x, prefix, _leaf, acc) when is_binary(x) do
    unless String.valid?(x),
      do:
        raise(
          ArgumentError,
          "#{where(prefix)} is a binary that is not UTF-8 text and not a {binary, type, shape} tensor"
        )

    {x, acc}
  end

  defp container(x, _prefix, _leaf, acc) when x in [:nan, :infinity, :neg_infinity],
    do: {{:obj, [{"__float__", %{nan: "nan", infinity: "inf", neg_infinity: "-inf"}[x]}]}, acc}

  defp container(x, prefix, _leaf, _acc) do
    raise ArgumentError,
          "#{inspect(x, limit: 5)} at #{where(prefix)} is neither a tensor ({binary, type, shape}) nor a " <>
            "container (map, list, tuple) nor a plain value; pass leaf: fun to convert structs"
  end

  defp index(list, prefix, leaf, acc) do
    {items, {_, acc}} =
      Enum.map_reduce(list, {0, acc}, fn v, {i, acc} ->
        {v, acc} = walk(v, join(prefix, i), leaf, acc)
        {v, {i + 1, acc}}
      end)

    {items, acc}
  end

  defp where(""), do: "the root"
  defp where(prefix), do: inspect(prefix)

  # {:ok, {name, dtype, shape_list, binary}} for a tensor leaf, :no otherwise.
  defp tensor(x, prefix, leaf) when is_struct(x) and is_function(leaf, 1) do
    case leaf.(x) do
      {bin, _, _} = t when is_binary(bin) ->
        tensor(t, prefix, nil)

      other ->
        raise ArgumentError,
              "leaf function gave #{inspect(other, limit: 5)} for #{where(prefix)}, not {binary, type, shape}"
    end
  end

  defp tensor({bin, type, shape}, prefix, _leaf) when is_binary(bin) and is_tuple(shape) do
    dims = Tuple.to_list(shape)

    if Enum.all?(dims, &(is_integer(&1) and &1 >= 0)) do
      dtype =
        Ckpt.Types.to_dtype(type) ||
          raise ArgumentError, "tensor #{where(prefix)}: unknown type #{inspect(type)}"

      numel = Enum.reduce(dims, 1, &(&1 * &2))
      bits = numel * Ckpt.Types.bits(dtype)

      if rem(bits, 8) != 0 or div(bits, 8) != byte_size(bin) do
        raise ArgumentError,
              "tensor #{where(prefix)}: #{byte_size(bin)} bytes, but shape #{inspect(shape)} of #{dtype} " <>
                "needs #{bits / 8}"
      end

      {:ok, {prefix, dtype, dims, bin}}
    else
      :no
    end
  end

  defp tensor(_, _, _), do: :no

  @doc """
  Rebuilds a tree from its structure (JSON text, decoded, or a catalog's
  `tree`), calling
  `leaf.(name)` for each tensor.
  """
  def decode(structure, leaf) when is_binary(structure) do
    case Ckpt.JSON.decode(structure) do
      {:ok, s} -> decode(s, leaf)
      {:error, why} -> raise ArgumentError, "the checkpoint's structure is not valid JSON: #{why}"
    end
  end

  def decode(structure, leaf), do: build(structure, leaf)

  defp build(list, leaf) when is_list(list), do: Enum.map(list, &build(&1, leaf))

  defp build({:obj, pairs} = obj, leaf) do
    case special(pairs) do
      {"__tensor__", name} -> leaf.(name)
      {"__dict__", items} -> Map.new(items, fn [k, v] -> {key(k), build(v, leaf)} end)
      {"__tuple__", items} -> items |> Enum.map(&build(&1, leaf)) |> List.to_tuple()
      {"__set__", items} -> MapSet.new(items, &build(&1, leaf))
      {"__bytes__", hex} -> Base.decode16!(hex, case: :mixed)
      {"__float__", f} -> Map.fetch!(%{"nan" => :nan, "inf" => :infinity, "-inf" => :neg_infinity}, f)
      {"__call__", name} -> %Ckpt.Call{name: name, args: Enum.map(get(obj, "args") || [], &build(&1, leaf))}
      {"__shards__", items} -> Enum.map(items, &build(&1, leaf))
      nil -> Map.new(pairs, fn {k, v} -> {k, build(v, leaf)} end)
    end
  end

  # A number libckpt kept as JSON text wrote it (beyond int64 and double).
  defp build({:number, text}, _leaf) do
    {:ok, n} = Ckpt.JSON.decode(text)
    n
  end

  defp build(x, _leaf), do: x

  @specials ~w(__tensor__ __dict__ __tuple__ __set__ __bytes__ __float__ __call__ __shards__)
  defp special(pairs) do
    Enum.find_value(@specials, fn s -> Enum.find(pairs, fn {k, _} -> k == s end) end)
  end

  defp get({:obj, pairs}, k), do: Enum.find_value(pairs, fn {kk, v} -> if kk == k, do: v end)

  defp key(k) when is_list(k), do: List.to_tuple(Enum.map(k, &key/1))
  defp key(k), do: k

  @doc """
  Nests `%{name => value}` by the dots in the names (no recorded
  structure): levels whose keys are exactly "0"…"n-1" become lists.
  """
  def unflatten(flat) do
    flat
    |> Enum.sort()
    |> Enum.reduce(%{}, fn {name, value}, root ->
      put_in_path(root, String.split(name, "."), {:__ckpt_leaf__, value}, name)
    end)
    |> lists()
  end

  defp put_in_path(node, [last], value, name) do
    if Map.has_key?(node, last), do: raise(ArgumentError, "#{inspect(name)} is both a tensor and a container")
    Map.put(node, last, value)
  end

  defp put_in_path(node, [p | rest], value, name) do
    child = Map.get(node, p, %{})

    if match?({:__ckpt_leaf__, _}, child),
      do: raise(ArgumentError, "#{inspect(name)} nests under the tensor #{inspect(p)}")

    Map.put(node, p, put_in_path(child, rest, value, name))
  end

  defp lists({:__ckpt_leaf__, value}), do: value

  defp lists(node) when is_map(node) do
    node = Map.new(node, fn {k, v} -> {k, lists(v)} end)

    if map_size(node) > 0 and index_keys?(Map.keys(node)),
      do: Enum.map(0..(map_size(node) - 1), &Map.fetch!(node, Integer.to_string(&1))),
      else: node
  end
end
