defmodule Ckpt.Fixtures do
  @moduledoc false
  # Files written by torch, safetensors, huggingface_hub and the Python
  # package (bindings/tests/fixtures.py, run with the worktree's .venv),
  # and checks of this binding's output by them.
  import ExUnit.Assertions

  @repo Path.expand("../../..", __DIR__)
  def repo, do: @repo

  def python do
    p = System.get_env("CKPT_TEST_PYTHON") || Path.join(@repo, ".venv/bin/python")

    File.exists?(p) ||
      raise "these tests compare with torch/safetensors: run `make venv python-package`, or set CKPT_TEST_PYTHON"

    p
  end

  @doc "Runs fixtures.py; fails the test with its output unless it succeeds."
  def py!(args) do
    {out, status} =
      System.cmd(python(), [Path.join(@repo, "bindings/tests/fixtures.py") | args], stderr_to_stdout: true)

    assert status == 0, "fixtures.py #{Enum.join(args, " ")} failed:\n#{out}"
    out
  end

  def setup_all do
    dir = Path.join(System.tmp_dir!(), "ckpt-elixir-fixtures-#{System.os_time()}")
    py!(["make", dir])
    :persistent_term.put({__MODULE__, :dir}, dir)
    :persistent_term.put({__MODULE__, :manifest}, parse(dir))
    dir
  end

  def dir, do: :persistent_term.get({__MODULE__, :dir})
  def path(file), do: Path.join(dir(), file)

  defp parse(dir) do
    raw = File.read!(Path.join(dir, "expected.raw"))
    bytes = fn off, n -> binary_part(raw, String.to_integer(off), String.to_integer(n)) end

    shape = fn s ->
      s |> String.split(",", trim: true) |> Enum.map(&String.to_integer/1) |> List.to_tuple()
    end

    for line <- String.split(File.read!(Path.join(dir, "manifest.tsv")), "\n", trim: true) do
      case String.split(line, "\t") do
        ["t", file, name, dtype, s, off, n] -> {:t, file, name, dtype, shape.(s), bytes.(off, n)}
        ["expect", case_, dtype, s, off, n] -> {:expect, case_, dtype, shape.(s), bytes.(off, n)}
        ["meta", file, k, v] -> {:meta, file, k, v}
        ["file", file, format, n] -> {:file, file, format, String.to_integer(n)}
      end
    end
  end

  def tensors(file), do: for({:t, ^file, name, dtype, shape, b} <- manifest(), do: {name, dtype, shape, b})
  def tensor(file, name), do: Enum.find(tensors(file), &(elem(&1, 0) == name)) || flunk("no fixture #{name}")
  def meta(file), do: for({:meta, ^file, k, v} <- manifest(), into: %{}, do: {k, v})

  def expected(c) do
    for({:expect, ^c, dtype, shape, b} <- manifest(), do: {dtype, shape, b}) |> hd()
  end

  defp manifest, do: :persistent_term.get({__MODULE__, :manifest})

  @doc "fixtures.py's gen(dtype, shape, seed), bytes for bytes."
  def gen(dtype, shape, seed) do
    n = shape |> Tuple.to_list() |> Enum.reduce(1, &(&1 * &2))

    for i <- 0..(n - 1)//1, into: <<>> do
      case dtype do
        "F32" -> <<i * 0.25 - seed::float-32-little>>
        "F64" -> <<i * 0.25 - seed::float-64-little>>
        "BF16" -> binary_part(<<rem(i, 512) - 256 + seed + 0.0::float-32-little>>, 2, 2)
        "F16" -> <<rem(i, 1024) - 512 + seed + 0.0::float-16-little>>
        "I64" -> <<i * 3 - seed::signed-64-little>>
        "I32" -> <<i * 7 - seed::signed-32-little>>
        "U8" -> <<rem(i + seed, 256)>>
      end
    end
  end

  def leaf(dtype, shape, seed), do: {gen(dtype, shape, seed), Ckpt.Types.to_type(dtype), shape}

  @doc "fixtures.py's tree(), as Elixir terms."
  def tree do
    %{
      7 => leaf("I64", {3}, 1),
      "embed" => %{"weight" => leaf("BF16", {16, 8}, 2)},
      "layers" => [
        %{"bias" => leaf("F32", {8}, 4), "kernel" => leaf("F32", {8, 8}, 3)},
        %{"kernel" => leaf("F32", {8, 8}, 5), "scale" => leaf("F16", {8}, 6)}
      ],
      "pair" => {leaf("I32", {2, 2}, 7), {leaf("U8", {5}, 8), leaf("F64", {}, 9)}}
    }
  end

  @doc "A spec file for `fixtures.py check`: tensors as hex, metadata."
  def spec!(path, tensors, meta \\ %{}) do
    lines =
      for(
        {name, dtype, shape, bin} <- tensors,
        do: "t\t#{name}\t#{dtype}\t#{shape_s(shape)}\t#{Base.encode16(bin, case: :lower)}"
      ) ++
        for {k, v} <- meta, do: "meta\t#{k}\t#{v}"

    File.write!(path, Enum.join(lines, "\n") <> "\n")
    path
  end

  defp shape_s(shape), do: shape |> Tuple.to_list() |> Enum.join(",")

  @doc "safetensors (Python) reads `checkpoint` and finds exactly these tensors and metadata."
  def safetensors_check!(checkpoint, tensors, meta \\ %{}) do
    py!(["check", checkpoint, spec!(checkpoint <> ".spec.tsv", tensors, meta)])
  end

  @doc "The hostile corpus: {file, status}; its files too big to commit are written first (tests/generated.py)."
  def hostile do
    {out, status} = System.cmd(python(), [Path.join(@repo, "tests/generated.py")], stderr_to_stdout: true)
    assert status == 0, "tests/generated.py failed:\n#{out}"
    dir = Path.join(@repo, "tests/hostile")

    for line <- String.split(File.read!(Path.join(dir, "manifest.json")), "\n"),
        [_, name, status] <- [Regex.run(~r/^\s*"([^"]+)":\s*"(CKPT_E_[A-Z_0-9]+(?:\/CKPT_D_[A-Z_0-9]+)?)"/, line)] do
      {Path.join([dir, "corpus", name]), status}
    end
  end

  @doc """
  The descriptors this process holds open on `path` (its /proc/self/fd
  links): the other tests, run at the same time, open files of their own.
  """
  def open_fds(path) do
    for fd <- File.ls!("/proc/self/fd"), File.read_link(Path.join("/proc/self/fd", fd)) == {:ok, path}, reduce: 0 do
      n -> n + 1
    end
  end
  def mapped?(path), do: File.read!("/proc/self/maps") |> String.contains?(path)
end

dir = Ckpt.Fixtures.setup_all()
ExUnit.after_suite(fn _ -> File.rm_rf!(dir) end)
ExUnit.start()
