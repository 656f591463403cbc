defmodule Mix.Tasks.Compile.CkptNif do
  @moduledoc """
  Builds `priv/ckpt_nif.so` from `c_src/ckpt_nif.c` and libckpt, with the
  system C compiler (no hex package needed):

    * `CKPT_LIB_DIR` names a directory holding `libckpt.a` (the repository's
      `build/`, as `make test-bindings` sets it) and its `ckpt.pc`;
      `CKPT_INCLUDE_DIR` the directory of `ckpt.h` (default: the
      repository's `include/`);
    * otherwise libckpt is built from this repository with CMake into
      `_build/libckpt`.
  """
  use Mix.Task.Compiler

  @repo Path.expand("../..", __DIR__)

  @impl true
  def run(_args) do
    {lib_dir, include_dir} = libckpt()
    erts = Path.join([:code.root_dir(), "erts-#{:erlang.system_info(:version)}", "include"])
    so = Path.join("priv", "ckpt_nif.so")
    sources = ["c_src/ckpt_nif.c", Path.join(include_dir, "ckpt.h"), Path.join(lib_dir, "libckpt.a")]

    # priv/ must exist before Mix links it into the build directory.
    File.mkdir_p!("priv")
    Mix.Project.build_structure()

    flags_file = Path.join(Mix.Project.app_path(), ".ckpt_nif_flags")
    flags = inspect({extra_flags(), lib_dir})
    flags_changed = File.read(flags_file) != {:ok, flags}

    if flags_changed or Mix.Utils.stale?(sources, [so]) do
      File.mkdir_p!(Path.dirname(flags_file))
      File.write!(flags_file, flags)
      cc = System.get_env("CC", "cc")

      args =
        ~w(-std=c11 -O2 -fPIC -shared -fvisibility=hidden -Wall -Wextra -Werror -Wno-missing-field-initializers) ++
          ["-I", erts, "-I", include_dir, "c_src/ckpt_nif.c", Path.join(lib_dir, "libckpt.a")] ++
          ["-Wl,--exclude-libs,ALL"] ++ private_libs(lib_dir) ++ extra_flags() ++ ["-o", so]

      case System.cmd(cc, args, stderr_to_stdout: true) do
        {_, 0} ->
          Mix.shell().info("Compiled #{so}")
          {:ok, []}

        {out, status} ->
          Mix.raise("compiling #{so} failed (#{cc}, exit #{status}):\n#{out}")
      end
    else
      {:noop, []}
    end
  end

  # CKPT_NIF_CFLAGS: extra compiler flags (e.g. -fsanitize=address with a
  # sanitizer build of libckpt in CKPT_LIB_DIR); a change rebuilds the NIF.
  defp extra_flags, do: OptionParser.split(System.get_env("CKPT_NIF_CFLAGS", ""))

  defp libckpt do
    include = System.get_env("CKPT_INCLUDE_DIR", Path.join(@repo, "include"))

    case System.get_env("CKPT_LIB_DIR") do
      nil ->
        {build_with_cmake(), include}

      dir ->
        unless File.exists?(Path.join(dir, "libckpt.a")),
          do: Mix.raise("CKPT_LIB_DIR=#{dir} holds no libckpt.a")

        {dir, include}
    end
  end

  defp build_with_cmake do
    out = Path.join(Mix.Project.build_path(), "libckpt")

    unless System.find_executable("cmake"),
      do: Mix.raise("libckpt: set CKPT_LIB_DIR to the directory of libckpt.a, or install cmake to build it")

    for args <- [
          ["-S", @repo, "-B", out, "-DCMAKE_BUILD_TYPE=Release", "-DCKPT_BUILD_TESTS=OFF"],
          ["--build", out, "--target", "ckpt_static", "-j", "#{System.schedulers_online()}"]
        ] do
      case System.cmd("cmake", args, stderr_to_stdout: true) do
        {_, 0} -> :ok
        {text, _} -> Mix.raise("building libckpt with cmake failed:\n#{text}")
      end
    end

    out
  end

  # The -l flags of ckpt.pc's Libs.private (zlib, xxhash, liburing, …).
  defp private_libs(lib_dir) do
    pc = Path.join(lib_dir, "ckpt.pc")

    libs =
      with {:ok, text} <- File.read(pc),
           line when is_binary(line) <-
             Enum.find(String.split(text, "\n"), &String.starts_with?(&1, "Libs.private:")) do
        line |> String.replace_prefix("Libs.private:", "") |> String.split()
      else
        _ -> ~w(-lpthread -lm -lz -lxxhash)
      end

    Enum.filter(libs, &String.starts_with?(&1, "-l"))
  end
end

defmodule Ckpt.MixProject do
  use Mix.Project

  def project do
    [
      app: :ckpt,
      version: "0.1.0",
      elixir: "~> 1.14",
      compilers: [:ckpt_nif] ++ Mix.compilers(),
      start_permanent: Mix.env() == :prod,
      deps: [],
      description: "Read, write and convert model checkpoints (safetensors, sharded, PyTorch) through libckpt",
      package: [licenses: ["Apache-2.0"], files: ~w(lib c_src mix.exs README.md)]
    ]
  end

  def application do
    [extra_applications: []]
  end
end
