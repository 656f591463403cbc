"""How the tests name a failure: its status and, where it has one, its
detail — "CKPT_E_CORRUPT/CKPT_D_DATA_HOLE", "CKPT_E_TRUNCATED" — as the
CLI's error lines and str(ckpt.Error) show them."""


def status_of(e):
    detail = getattr(e, "detail", None)
    return f"{e.status}/{detail}" if detail else e.status
