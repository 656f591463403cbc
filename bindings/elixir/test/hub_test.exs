defmodule Ckpt.HubTest do
  # hf:// names through the Elixir binding (issue 30: "wherever a path is
  # taken"), against the tests' Hub on loopback (tests/sources/hub.py,
  # started by bindings/tests/fixtures.py hub-serve).
  #
  # libckpt reads HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE from the OS
  # environment, which System.put_env does not change for NIFs (the BEAM
  # keeps its own copy since OTP 21): they are set before the VM starts, as
  # a user sets them.  So the checks run in a second VM, started with that
  # environment and this suite's compiled binding.
  use ExUnit.Case, async: true
  import Ckpt.Fixtures
  @moduletag :tmp_dir

  defp serve_hub(folder) do
    port =
      Port.open({:spawn_executable, python()}, [
        :binary,
        {:line, 4096},
        {:args, [Path.join(repo(), "bindings/tests/fixtures.py"), "hub-serve", folder]}
      ])

    receive do
      {^port, {:data, {:eol, "ENDPOINT " <> endpoint}}} -> {port, endpoint}
    after
      60_000 -> flunk("the test Hub did not start")
    end
  end

  # Runs `code` in a new VM with `env` and this build's ckpt; its last line.
  defp in_new_vm(code, env) do
    ebin = Path.join(Mix.Project.build_path(), "lib/ckpt/ebin")
    clear = for v <- ~w(HF_HUB_CACHE HF_HUB_OFFLINE HF_TOKEN HF_TOKEN_PATH), do: {v, nil}
    {out, status} = System.cmd("elixir", ["-pa", ebin, "-e", code], env: clear ++ env, stderr_to_stdout: true)
    assert status == 0, out
    out |> String.split("\n", trim: true) |> List.last()
  end

  @digest """
  bytes = fn c -> for t <- Ckpt.tensors(c), into: %{}, do: {t.name, Ckpt.read!(c, t.name, copy: true)} end
  digest = fn m -> :crypto.hash(:sha256, :erlang.term_to_binary(Enum.sort(m))) |> Base.encode16() end
  """

  test "a Hub repo opens through the Hub's cache, and offline from it", %{tmp_dir: tmp} do
    local = Ckpt.open!(path("sharded"))
    want = for(t <- Ckpt.tensors(local), into: %{}, do: {t.name, Ckpt.read!(local, t.name, copy: true)})
    want = :crypto.hash(:sha256, :erlang.term_to_binary(Enum.sort(want))) |> Base.encode16()
    {port, endpoint} = serve_hub(path("sharded"))
    home = Path.join(tmp, "hf-home")
    env = [{"HF_ENDPOINT", endpoint}, {"HF_HOME", home}]

    online = """
    #{@digest}
    hub = Ckpt.open!("hf://org/tiny")
    {:ok, %{file_sha256: sha}} = Ckpt.verify_report(hub)
    {:error, %Ckpt.Error{status: status, message: m}} = Ckpt.open("hf://org/gated")
    IO.puts(Enum.join([length(hub.files), digest.(bytes.(hub)), sha, status, m =~ "gated"], " "))
    """

    assert in_new_vm(online, env) == "3 #{want} 3 auth true"

    repo_dir = Path.join(home, "hub/models--org--tiny")
    commit = String.trim(File.read!(Path.join(repo_dir, "refs/main")))
    assert File.exists?(Path.join([repo_dir, "snapshots", commit, "model.safetensors.index.json"]))

    Port.close(port)
    offline = "#{@digest}\nIO.puts(digest.(bytes.(Ckpt.open!(\"hf://org/tiny\"))))"
    assert in_new_vm(offline, [{"HF_HUB_OFFLINE", "1"} | env]) == want
  end
end
