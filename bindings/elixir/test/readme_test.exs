defmodule Ckpt.ReadmeTest do
  # README.md of this binding, run as written: a new project whose mix.exs
  # holds the README's `deps`, beside a checkout of this binding where that
  # path points, runs the README's example with `mix run`.
  use ExUnit.Case, async: true
  @moduletag :tmp_dir
  # A new project compiles the NIF and the binding before it runs.
  @moduletag timeout: 600_000

  @binding Path.expand("..", __DIR__)
  @repo Path.expand("../..", @binding)

  defp readme, do: File.read!(Path.join(@binding, "README.md"))

  defp elixir_blocks do
    Regex.scan(~r/^```elixir\n(.*?)^```$/ms, readme(), capture: :all_but_first) |> List.flatten()
  end

  # The libckpt the suite was built with (make test-bindings sets
  # CKPT_LIB_DIR), else the repository's build/; with neither, the new
  # project builds libckpt with CMake, as the README says.
  defp lib_dir do
    System.get_env("CKPT_LIB_DIR") ||
      Enum.find([Path.join(@repo, "build")], &File.exists?(Path.join(&1, "libckpt.a")))
  end

  test "the README's path dependency and example work in a project of their own", %{tmp_dir: tmp} do
    [deps, example] = elixir_blocks()
    [_, path] = Regex.run(~r/\{:ckpt, path: "([^"]+)"\}/, deps)
    project = Path.join(tmp, "my_app")
    File.mkdir_p!(project)

    # The checkout the path names: what this binding's package holds
    # (mix.exs's package files), and the repository's include/ two levels up.
    # A copy, so that the new project's NIF does not replace the one this
    # suite has loaded (bindings/elixir/priv).
    checkout = Path.expand(path, project)
    File.mkdir_p!(checkout)
    for f <- Mix.Project.config()[:package][:files], do: File.cp_r!(Path.join(@binding, f), Path.join(checkout, f))
    File.ln_s!(Path.join(@repo, "include"), Path.expand("../../include", checkout))

    File.write!(Path.join(project, "mix.exs"), """
    defmodule MyApp.MixProject do
      use Mix.Project

      def project, do: [app: :my_app, version: "0.1.0", elixir: "~> 1.14", deps: deps()]

    #{deps}end
    """)

    File.write!(Path.join(project, "example.exs"), example)
    env = [{"MIX_ENV", "dev"}, {"MIX_BUILD_PATH", nil}, {"MIX_EXS", nil}, {"CKPT_LIB_DIR", lib_dir()}]
    {out, status} = System.cmd("mix", ["run", "example.exs"], cd: project, env: env, stderr_to_stdout: true)
    assert status == 0, "the README's example failed in a project depending on #{path}:\n#{out}"
    assert out =~ "model.safetensors round-tripped"

    # Where the README says the NIF goes, and how the project finds it.
    assert File.regular?(Path.join(checkout, "priv/ckpt_nif.so"))
    linked = Path.join(project, "_build/dev/lib/ckpt/priv")
    assert {:ok, %{type: :symlink}} = File.lstat(linked)
    assert File.regular?(Path.join(linked, "ckpt_nif.so"))
  end

  test "the README names every setting the NIF's build reads" do
    text = readme()
    settings = Regex.scan(~r/System\.get_env\("([A-Z_]+)"/, File.read!(Path.join(@binding, "mix.exs")))
    assert [_ | _] = settings

    for [_, name] <- settings do
      assert text =~ "`#{name}`", "README.md does not say what #{name} does"
    end
  end
end
