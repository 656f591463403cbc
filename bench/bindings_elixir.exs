# The Elixir binding's round trip of a ~1 GB parameter tree (bench/bindings_suite.py
# runs it with `mix run`, one phase per BEAM):
#
#   save DIR GB SHARD   builds a Llama-shaped nested tree of f32 tensors (maps,
#                       lists, a tuple per layer) and times Ckpt.save to DIR in
#                       SHARD-sized shards; writes DIR.crc (crc32 per tensor)
#   load DIR MODE       times Ckpt.load_tree(DIR) (MODE zero_copy: binaries over
#                       the mapping; copy: BEAM binaries), then crc32 over every
#                       loaded byte (reported apart) and checks it against DIR.crc
#
# Prints one `key value` line per figure.  Memory: the peak of
# :erlang.memory(:total) and (:binary), sampled every 2 ms by a process on
# a normal scheduler while the dirty NIFs run; the BEAM's VmRSS before the
# operation, its RssAnon / RssFile after it (the data still referenced)
# and its VmHWM.
defmodule Bench do
  def main(["save", dir, gb, shard]) do
    tree = tree(String.to_float(gb))
    bytes = data_bytes(tree)
    crc = crcs(tree)
    File.write!(dir <> ".crc", :erlang.term_to_binary(crc))
    :erlang.garbage_collect()
    base = :erlang.memory()
    rss = status()
    {seconds, {:ok, files}} = sampled(fn -> Ckpt.save(tree, dir, max_shard_size: shard) end)
    report(seconds, bytes, base, rss)
    IO.puts("files #{length(files)}")
    IO.puts("tensors #{map_size(crc)}")
  end

  def main(["load", dir, mode]) do
    :erlang.garbage_collect()
    base = :erlang.memory()
    rss = status()
    {seconds, {:ok, tree}} = sampled(fn -> Ckpt.load_tree(dir, copy: mode == "copy") end)
    {touch, crc} = :timer.tc(fn -> crcs(tree) end)
    want = :erlang.binary_to_term(File.read!(dir <> ".crc"))
    if crc != want, do: raise("loaded bytes differ from the saved ones")
    report(seconds, data_bytes(tree), base, rss)
    IO.puts("checksum_seconds #{touch / 1.0e6}")
    IO.puts("tensors #{map_size(crc)}")
  end

  # embed + N layers of attention (4 × d²) and MLP (2 × d × 2.75d) f32 matrices.
  defp tree(gb) do
    d = 1024
    embed = 32000 * d * 4
    layer = (4 * d * d + 2 * d * 2816) * 4 + 2 * d * 4
    n = max(1, round((gb * 1.0e9 - embed) / layer))
    block = :crypto.strong_rand_bytes(4 * 1024 * 1024)

    t = fn shape ->
      size = shape |> Tuple.to_list() |> Enum.reduce(4, &(&1 * &2))
      bs = byte_size(block)
      bin = IO.iodata_to_binary([:binary.copy(block, div(size, bs)), binary_part(block, 0, rem(size, bs))])
      {bin, {:f, 32}, shape}
    end

    %{
      "embed" => %{"weight" => t.({32000, d})},
      "layers" =>
        for _ <- 1..n do
          %{
            "attn" => %{"q" => t.({d, d}), "k" => t.({d, d}), "v" => t.({d, d}), "o" => t.({d, d})},
            "mlp" => %{"up" => t.({2816, d}), "down" => t.({d, 2816})},
            "norm" => {t.({d}), t.({d})}
          }
        end,
      "step" => 1000
    }
  end

  defp leaves({b, _, s}, acc, name) when is_binary(b) and is_tuple(s), do: [{name, b} | acc]
  defp leaves(m, acc, name) when is_map(m), do: Enum.reduce(m, acc, fn {k, v}, acc -> leaves(v, acc, "#{name}.#{k}") end)

  defp leaves(l, acc, name) when is_list(l),
    do: l |> Enum.with_index() |> Enum.reduce(acc, fn {v, i}, acc -> leaves(v, acc, "#{name}.#{i}") end)

  defp leaves(t, acc, name) when is_tuple(t), do: leaves(Tuple.to_list(t), acc, name)
  defp leaves(_, acc, _), do: acc

  defp crcs(tree), do: tree |> leaves([], "") |> Map.new(fn {k, b} -> {k, :erlang.crc32(b)} end)
  defp data_bytes(tree), do: tree |> leaves([], "") |> Enum.reduce(0, fn {_, b}, acc -> acc + byte_size(b) end)

  defp sampled(fun) do
    me = self()
    sampler = spawn_link(fn -> sample(me, 0, 0) end)
    {us, result} = :timer.tc(fun)
    send(sampler, :stop)

    receive do
      {:peaks, total, binary} ->
        Process.put(:peaks, {total, binary})
    end

    {us / 1.0e6, result}
  end

  defp sample(parent, total, binary) do
    receive do
      :stop -> send(parent, {:peaks, total, binary})
    after
      2 ->
        m = :erlang.memory([:total, :binary])
        sample(parent, max(total, m[:total]), max(binary, m[:binary]))
    end
  end

  defp report(seconds, bytes, base, before) do
    {total, binary} = Process.get(:peaks)
    now = status()
    IO.puts("vmrss_before #{before["VmRSS"]}")
    IO.puts("rss_anon #{now["RssAnon"]}")
    IO.puts("rss_file #{now["RssFile"]}")
    IO.puts("seconds #{seconds}")
    IO.puts("data_bytes #{bytes}")
    IO.puts("beam_total_before #{base[:total]}")
    IO.puts("beam_total_peak #{max(total, :erlang.memory(:total))}")
    IO.puts("beam_binary_peak #{max(binary, :erlang.memory(:binary))}")
    IO.puts("vmhwm_bytes #{vmhwm()}")
  end

  defp vmhwm, do: status()["VmHWM"]

  # /proc/self/status sizes, in bytes.
  defp status do
    for [k, kb] <- Regex.scan(~r/^(\w+):\s+(\d+) kB/m, File.read!("/proc/self/status"), capture: :all_but_first),
        into: %{},
        do: {k, String.to_integer(kb) * 1024}
  end

end

Bench.main(System.argv())
