"""A URL that answers with a web page (issue 27, item 6): a directory named
without its trailing '/' that nginx lists (autoindex), or an error page
served with 200, is called "not a checkpoint … it looks like HTML", with
the directory form to try — which then opens."""
import shutil

import pytest
from conftest import run
from servers import Nginx, nginx_available

import ckpt


@pytest.fixture(scope="module")
def listing(served, tmp_path_factory):
    if not nginx_available():
        pytest.skip("nginx is not installed (Debian's nginx-light: make deps installs it)")
    served_root, _ = served
    root = tmp_path_factory.mktemp("listing-root")
    shutil.copytree(served_root / "sharded", root / "sharded")
    (root / "page.bin").write_text("<!DOCTYPE html>\n<html><body>Sign in to download</body></html>\n")
    extra = f"location /listing/ {{ alias {root}/; autoindex on; }}"
    with Nginx(root, tmp_path_factory.mktemp("nginx-listing"), extra=extra) as n:
        yield n


def test_a_directory_listing_is_no_checkpoint_and_its_slash_form_opens(listing, served):
    url = listing.url("listing/sharded")  # nginx redirects to listing/sharded/ and lists it
    r = run("inspect", url)
    assert r.returncode == 1, r.stderr
    assert "not a checkpoint ckpt reads (it looks like HTML, a web page)" in r.stderr, r.stderr
    assert f"if this URL is a directory, name it with a trailing '/': {url}/" in r.stderr
    assert "[CKPT_E_UNKNOWN_FORMAT]" in r.stderr and "header length" not in r.stderr
    with pytest.raises(ckpt.FormatError, match="trailing '/'") as e:
        ckpt.open(url)
    assert type(e.value) is ckpt.FormatError
    # The suggested form is the directory, which opens.
    _, sd = served
    r = run("inspect", url + "/")
    assert r.returncode == 0, r.stderr
    with ckpt.open(url + "/") as c:
        assert sorted(c.keys()) == sorted(sd)


def test_a_web_page_in_place_of_a_file(listing):
    r = run("inspect", listing.url("listing/page.bin"))
    assert r.returncode == 1 and "not a checkpoint ckpt reads (it looks like HTML, a web page)" in r.stderr
