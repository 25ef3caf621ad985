// elastra._elastra: the bindings of PyWorker (py_worker.h). Only binds; the public Python API is
// python/elastra/__init__.py. Statuses become Python exceptions in one place, the translator
// below, with the classes __init__.py registers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "elastra/data_type.h"
#include "elastra/status.h"
#include "python/py_worker.h"

namespace py = pybind11;
using elastra::python::Override;
using elastra::python::PyWorker;
using elastra::python::RegionInfo;
using elastra::python::StatusError;

namespace {

// code -> the elastra.Error subclass, registered by __init__.py. Never freed: the translator may
// run until the interpreter ends.
py::dict* error_classes = nullptr;

void RaiseStatus(const elastra::Status& status) {
  const int code = static_cast<int>(status.code());
  py::object cls;
  if (error_classes != nullptr && error_classes->contains(py::int_(code))) {
    cls = (*error_classes)[py::int_(code)];
  } else {
    cls = py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
  }
  py::object error = cls(code, status.message());
  PyErr_SetObject(cls.ptr(), error.ptr());
}

}  // namespace

PYBIND11_MODULE(_elastra, m) {
  m.doc() = "Elastra's C++ worker, bound for the elastra package (use `import elastra`).";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      RaiseStatus(e.status);
    }
  });
  m.def("_register_errors", [](py::dict classes) {
    if (error_classes == nullptr) error_classes = new py::dict();
    error_classes->clear();
    for (auto item : classes) (*error_classes)[item.first] = item.second;
  });
  m.def("status_code_name", [](int code) {
    return std::string(elastra::StatusCodeName(static_cast<elastra::StatusCode>(code)));
  });
  m.def("data_type_size", [](int type) {
    return elastra::DataTypeSize(static_cast<elastra::DataType>(type));
  });

  py::class_<Override>(m, "_Override")
      .def(py::init([](std::string name, py::object value) {
        Override o;
        o.name = std::move(name);
        if (py::isinstance<py::str>(value)) {
          o.is_text = true;
          o.text = value.cast<std::string>();
        } else {
          o.number = value.cast<int64_t>();
        }
        return o;
      }));

  py::class_<RegionInfo>(m, "_Region")
      .def_readonly("global_shape", &RegionInfo::global_shape)
      .def_readonly("row_begin", &RegionInfo::row_begin)
      .def_readonly("row_end", &RegionInfo::row_end)
      .def_readonly("col_begin", &RegionInfo::col_begin)
      .def_readonly("col_end", &RegionInfo::col_end)
      .def_readonly("flat_begin", &RegionInfo::flat_begin)
      .def_readonly("flat_end", &RegionInfo::flat_end)
      .def_readonly("local_shape", &RegionInfo::local_shape);

  py::class_<PyWorker>(m, "_Worker")
      .def(py::init<const std::vector<Override>&>())
      .def("add_tensor", &PyWorker::AddTensor)
      .def("add_scalar", &PyWorker::AddScalar)
      .def("set_num_layers", &PyWorker::SetNumLayers)
      .def("get_scalar", &PyWorker::GetScalar)
      .def("set_scalar", &PyWorker::SetScalar)
      .def("tensor_names", &PyWorker::TensorNames)
      .def("region", &PyWorker::Region)
      .def("tensor_dtype", &PyWorker::TensorDtype)
      .def("view", &PyWorker::View)
      .def("close", &PyWorker::Close)
      .def("start", &PyWorker::Start)
      .def("step_end", &PyWorker::StepEnd)
      .def("finish", &PyWorker::Finish)
      .def("report", &PyWorker::Report)
      .def("report_samples", &PyWorker::ReportSamples)
      .def_property_readonly("step", &PyWorker::step)
      .def_property_readonly("generation", &PyWorker::generation)
      .def_property_readonly("layout",
                             [](const PyWorker& w) {
                               elastra::Layout l = w.layout();
                               return py::make_tuple(l.dp, l.pp, l.tp);
                             })
      .def_property_readonly("coordinates",
                             [](const PyWorker& w) {
                               elastra::Coordinates c = w.coordinates();
                               return py::make_tuple(c.rank, c.dp_rank, c.pp_rank, c.tp_rank);
                             })
      .def_property_readonly("rank", &PyWorker::rank)
      .def_property_readonly("world_size", &PyWorker::world_size)
      .def_property_readonly("worker_id", &PyWorker::worker_id)
      .def_property_readonly("started", &PyWorker::started)
      .def("group_rank", &PyWorker::GroupRank)
      .def("group_size", &PyWorker::GroupSize)
      .def("allreduce", &PyWorker::Allreduce)
      .def("broadcast", &PyWorker::Broadcast)
      .def("allgather", &PyWorker::Allgather)
      .def("reduce_scatter", &PyWorker::ReduceScatter)
      .def("barrier", &PyWorker::Barrier)
      .def("send", &PyWorker::Send)
      .def("recv", &PyWorker::Recv);
}
