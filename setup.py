"""tff_priv: privacy-preserving aggregation for TensorFlow Federated."""

import os
import re

import setuptools

_HERE = os.path.dirname(os.path.abspath(__file__))


def _version():
  with open(os.path.join(_HERE, 'tff_priv', '__init__.py')) as f:
    return re.search(r"^__version__ = '([^']+)'", f.read(), re.M).group(1)


setuptools.setup(
    name='tff_priv',
    version=_version(),
    description=(
        'Privacy-preserving aggregation factories and learning processes for '
        'TensorFlow Federated: LDP-FL, Gaussian UDP with CRD, Fed-SMP, '
        'parameter distortion.'
    ),
    long_description=open(os.path.join(_HERE, 'README.md')).read(),
    long_description_content_type='text/markdown',
    packages=setuptools.find_packages(include=['tff_priv', 'tff_priv.*', 'tasks', 'tasks.*']),
    python_requires='>=3.9,<3.12',
    # The full pinned stack lives in requirements.txt / requirements-nodeps.txt and is installed by
    # scripts/setup.sh: TFF 0.87.0's own jax pin does not resolve, so it cannot be a plain dependency.
    install_requires=[
        'absl-py>=1.0,<2',
        'dp-accounting==0.4.3',
        'numpy>=1.25,<2',
        'tensorflow>=2.14,<2.15',
        'tensorflow-privacy==0.9.0',
    ],
    license='Apache 2.0',
)
