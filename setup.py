"""The package's one compiled part: OpenCV's 8-bit CLAHE, bit for bit and faster
(dali_backend/transforms/_clahe.c). Everything else is in pyproject.toml.

The extension is optional: where no C compiler is found the install goes on without it and the
Clahe operation calls OpenCV (the same pixels, slower). It is compiled without FMA contraction
(-ffp-contract=off): every float32 step of the blend must stay the separate IEEE operation OpenCV's
code performs, or pixels on rounding ties would differ.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    def build_extensions(self):
        # gcc and clang (also as mingw32 / cygwin). The source uses GCC builtins: MSVC fails to build it and
        # the install goes on without it (OpenCV's CLAHE is used then).
        if self.compiler.compiler_type in ("unix", "mingw32", "cygwin"):
            for ext in self.extensions:
                ext.extra_compile_args = ["-O3", "-ffp-contract=off", "-fno-fast-math"]
        super().build_extensions()


setup(ext_modules=[Extension("dali_backend.transforms._clahe", ["dali_backend/transforms/_clahe.c"], optional=True)],
      cmdclass={"build_ext": BuildExt})
