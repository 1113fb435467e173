"""`--custom-generate-function-path generate.generate`: the path slime's launch configs use, served by the Vime bridge."""

from vime_bridge import generate

__all__ = ["generate"]
