# Installs kiln into a scratch prefix, builds tests/install/consumer against it with
# find_package(kiln), and runs it. Invoked by ctest (label `install`).
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message("${out}")
endfunction()
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/build" -G Ninja
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix"
    # The consumer is built with the same flags as kiln (a sanitizer build's static libraries
    # need the sanitizer at link time).
    "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
    "-DQUICKSTART_SOURCE=${SOURCE_DIR}/examples/quickstart.cc")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run(${CMAKE_COMMAND} -E env KILN_DISK_CACHE=0 "${WORK_DIR}/build/consumer")
file(REMOVE_RECURSE "${WORK_DIR}")
