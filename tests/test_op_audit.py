"""tests/op_audit.py's check against TF Serving's TensorFlow (2.20): an op or an attribute that
2.20 does not register is named, in the graph and in its functions."""
from pathlib import Path

from tensorflow.core.protobuf import saved_model_pb2

from op_audit import serving_registry_problems


def test_ops_and_attributes_that_tensorflow_2_20_lacks_are_named(tmp_path: Path) -> None:
    saved = saved_model_pb2.SavedModel()
    graph = saved.meta_graphs.add().graph_def
    graph.node.add(name="image", op="DecodeJxl")  # new in TensorFlow 2.21
    ok = graph.node.add(name="sum", op="AddV2")
    ok.attr["T"].type = 1
    ok.attr["_output_shapes"].list.SetInParent()  # the runtime's own attributes pass
    function = graph.library.function.add()
    function.signature.name = "search"
    item = function.node_def.add(name="item", op="TensorListGetItem")
    item.attr["element_dtype"].type = 1
    item.attr["Tshape"].type = 3  # an attribute TensorListGetItem gained in 2.21
    function.node_def.add(name="call", op="search")  # a call of a library function
    (tmp_path / "saved_model.pb").write_bytes(saved.SerializeToString())
    assert serving_registry_problems(tmp_path) == ["op DecodeJxl (image)",
                                                   "TensorListGetItem.Tshape (item)"]
