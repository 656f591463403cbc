"""llama.cpp's convert_hf_to_gguf.py, imported once and run job after job
(test_llamacpp.reference's worker): each job is the script's main() with the
command line a separate `python convert_hf_to_gguf.py MODEL --outfile OUT
--outtype TYPE` would have.  Importing torch, transformers and the script's
conversion modules is about half a run's CPU time; a fresh clone makes
dozens of references, so they share one import.  The files are the same
bytes a separate process writes (test_llamacpp.py's byte-for-byte tests
compare them with ckpt's conversions).

Protocol: one JSON job a line on stdin ({"model", "outfile", "outtype"}),
one JSON answer a line on stdout ({"ok": true} or {"ok": false, "error":
the tail of the job's log and traceback}).  The script's own output goes to
a log file a job.  A failed job ends the worker (nothing of it is kept for
the next job); the parent starts a fresh one."""
import json
import os
import runpy
import sys
import tempfile
import traceback


def run(main, script, job):
    """main() on the job's command line; its stdout and stderr in a
    temporary file, whose tail is the error if it fails."""
    with tempfile.TemporaryFile("w+") as log:
        saved_fd, saved_stdout = os.dup(2), sys.stdout
        sys.stderr.flush()
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr
        sys.argv = [script, job["model"], "--outfile", job["outfile"], "--outtype", job["outtype"]]
        try:
            main()
            return {"ok": True}
        except BaseException:  # noqa: B036  (sys.exit of the script's own refusals included)
            sys.stderr.write(traceback.format_exc())
            sys.stderr.flush()
            log.seek(0)
            return {"ok": False, "error": log.read()[-3000:]}
        finally:
            sys.stderr.flush()
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            sys.stdout = saved_stdout


def serve(script):
    answers = os.fdopen(os.dup(1), "w")
    sys.stdout = sys.stderr  # what the script prints never mixes with the answers
    sys.path.insert(0, os.path.dirname(script))
    main = runpy.run_path(script, run_name="convert_hf_to_gguf")["main"]
    for line in sys.stdin:
        answer = run(main, script, json.loads(line))
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
        if not answer["ok"]:
            return


if __name__ == "__main__":
    serve(sys.argv[1])
