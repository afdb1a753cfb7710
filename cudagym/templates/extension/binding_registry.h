// cudagym protected file: do not edit (the judge builds with its own copy).
//
// A registry of Python bindings. Each kernels/<op>_binding.cpp registers its functions with
// REGISTER_BINDING(name, fn); binding.cpp exposes them all as the module `cuda_extension`, so adding an
// operator never touches a shared file.
#pragma once

#ifdef CUDAGYM_REGISTRY_ONLY
#include <pybind11/pybind11.h>  // binding.cpp: the module init uses no torch type
#else
#include <torch/extension.h>
#endif

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace cudagym {

using BindingFn = std::function<void(pybind11::module_&)>;

// Hidden visibility: one registry per extension module. With default visibility g++ makes the static
// below a process-wide (STB_GNU_UNIQUE) symbol, so a second solution loaded into the same process would
// also expose, and on a name clash dispatch to, the first solution's functions.
class __attribute__((visibility("hidden"))) BindingRegistry {
 public:
  static BindingRegistry& instance() {
    static BindingRegistry registry;
    return registry;
  }
  void add(std::string name, BindingFn fn) { entries_.emplace_back(std::move(name), std::move(fn)); }
  void apply(pybind11::module_& m) const {
    for (const auto& entry : entries_) entry.second(m);
  }

 private:
  std::vector<std::pair<std::string, BindingFn>> entries_;
};

struct BindingRegistrar {
  BindingRegistrar(const char* name, BindingFn fn) { BindingRegistry::instance().add(name, std::move(fn)); }
};

}  // namespace cudagym

// REGISTER_BINDING(name, fn): expose the C++ function `fn` to Python as cuda_extension.<name>.
#define REGISTER_BINDING(name, fn)                                                       \
  static ::cudagym::BindingRegistrar cudagym_binding_registrar_##name(                   \
      #name, [](pybind11::module_& m) { m.def(#name, &fn, #name); })
