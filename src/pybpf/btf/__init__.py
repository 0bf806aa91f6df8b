"""BTF, the BPF Type Format: one reader, writer and resolver for the whole project.

- ``types``: one record per BTF kind (Linux 6.18: INT ... ENUM64).
- ``spec``: ``Btf``, a parsed blob (an object's .BTF section or the kernel's
  /sys/kernel/btf/vmlinux): ids, lookup by name, ``resolve``/``size_of``, encoding back.
- ``ext``: .BTF.ext (func_info, line_info, CO-RE relocation records).
- ``codecs``: ``btf_codec(btf, id)``, a key/value codec that decodes as the C declared. It
  belongs to the layer of ``pybpf.codecs`` (above ``System``), so this package does not
  import it: the backends may import ``pybpf.btf``; import ``pybpf.btf.codecs`` for codecs.
"""

# The package exports what its modules do (their __all__), gathered as asyncio's __init__ does.
from . import ext as _ext
from . import spec as _spec
from . import types as _types
from .ext import *  # noqa: F403
from .spec import *  # noqa: F403
from .types import *  # noqa: F403

__all__ = [*_ext.__all__, *_spec.__all__, *_types.__all__]
