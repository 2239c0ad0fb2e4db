# Install rules and the Debian packages (`make package`, CPack):
#   gridtrain       /usr/bin/gridnode, its man page, the default config /etc/gridtrain/cluster.yaml (a conffile),
#                   the systemd units, the boot scripts under /usr/lib/gridtrain, /var/lib/gridtrain (checkpoints);
#                   its library dependencies found by dpkg-shlibdeps
#   python3-gridtrain  the Python package (import gridtrain: the binding and the torch glue), when the build has it,
#                   under Debian's python3 path; it recommends python3-torch (gridtrain.torch needs it)
#   gridtrain-cuda  the CUDA learner module, when the build has one. CUDA, cuBLAS and cuDNN are not Debian packages:
#                   the module expects them where the build found them (its RPATH), so it names no dependency on
#                   them; the binary runs without this package (learner.device auto then trains on the CPU).
# Paths are the packages' (prefix /usr) whatever CMAKE_INSTALL_PREFIX says.
include(GNUInstallDirs)

install(TARGETS gridnode RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT node)
install(PROGRAMS deploy/boot/gridtrain-boot deploy/boot/gridtrain-node DESTINATION lib/gridtrain COMPONENT node)
install(FILES deploy/systemd/gridnode.service DESTINATION lib/systemd/system COMPONENT node)
# The AWS pieces: discovery of the group's machines and the spot-interruption watch (deploy/aws/README.md).
foreach(aws_script discover-aws-seeds spot-watch)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/deploy/aws/${aws_script})
    install(PROGRAMS deploy/aws/${aws_script} DESTINATION lib/gridtrain COMPONENT node)
  endif()
endforeach()
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/deploy/aws/gridtrain-spot-watch.service)
  install(FILES deploy/aws/gridtrain-spot-watch.service DESTINATION lib/systemd/system COMPONENT node)
endif()
install(FILES deploy/package/cluster.yaml DESTINATION /etc/gridtrain COMPONENT node)
install(DIRECTORY DESTINATION /var/lib/gridtrain COMPONENT node)

# The man page, from the binary's own --help texts.
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/gridnode.1.gz
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/scripts/make-man.sh $<TARGET_FILE:gridnode> ${CMAKE_BINARY_DIR}/gridnode.1
  COMMAND gzip -9nf ${CMAKE_BINARY_DIR}/gridnode.1
  DEPENDS gridnode ${CMAKE_CURRENT_SOURCE_DIR}/scripts/make-man.sh
  COMMENT "gridnode.1.gz from gridnode's --help")
add_custom_target(gridnode_man ALL DEPENDS ${CMAKE_BINARY_DIR}/gridnode.1.gz)
install(FILES ${CMAKE_BINARY_DIR}/gridnode.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT node)

if(GRIDTRAIN_PYTHON_ENABLED)
  # The Python package where Debian's python3 finds it: the module and the Python layer.
  set(GRIDTRAIN_PYTHON_INSTALL_DIR lib/python3/dist-packages/gridtrain)
  install(TARGETS _gridtrain LIBRARY DESTINATION ${GRIDTRAIN_PYTHON_INSTALL_DIR} COMPONENT python)
  file(GLOB gridtrain_python_files ${CMAKE_CURRENT_SOURCE_DIR}/python/gridtrain/*.py)
  install(FILES ${gridtrain_python_files} DESTINATION ${GRIDTRAIN_PYTHON_INSTALL_DIR} COMPONENT python)
endif()

if(GRIDTRAIN_CUDA_ENABLED)
  # The RPATH the module was linked with (the toolkit's and cuDNN's folders) stays in the installed copy.
  set_target_properties(gridtrain_cuda PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS gridtrain_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/gridtrain COMPONENT cuda)
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gridtrain)
set(CPACK_PACKAGE_VENDOR "gridtrain")
set(CPACK_PACKAGE_CONTACT "gridtrain maintainers <maintainers@gridtrain.invalid>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "elastic, grid-structured distributed training: one gridnode per machine")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)  # a RelWithDebInfo gridnode is 80 MB, most of it debug information
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL node)
if(GRIDTRAIN_CUDA_ENABLED)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
endif()
if(GRIDTRAIN_PYTHON_ENABLED)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://gridtrain.invalid")
set(CPACK_DEBIAN_NODE_PACKAGE_NAME gridtrain)
set(CPACK_DEBIAN_NODE_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_NODE_PACKAGE_DEPENDS "gnuplot-nox | gnuplot")
set(CPACK_DEBIAN_NODE_PACKAGE_RECOMMENDS "dataset-fashion-mnist, curl")
set(CPACK_DEBIAN_NODE_DESCRIPTION
    "elastic, grid-structured distributed training: one gridnode per machine\n"
    " Nodes arrange themselves in a d-dimensional grid and average their parameters along its lines with\n"
    " quorum allreduces while each trains its own learner; they join and leave at any time, and the grid\n"
    " re-forms without a restart. Includes the systemd unit, the boot scripts for a group of machines\n"
    " (AWS Auto Scaling group discovery included) and a default config.")
set(CPACK_DEBIAN_NODE_PACKAGE_CONTROL_EXTRA
    ${CMAKE_CURRENT_SOURCE_DIR}/deploy/package/conffiles
    ${CMAKE_CURRENT_SOURCE_DIR}/deploy/package/postinst
    ${CMAKE_CURRENT_SOURCE_DIR}/deploy/package/prerm)
set(CPACK_DEBIAN_CUDA_PACKAGE_NAME gridtrain-cuda)
set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS "gridtrain (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_CUDA_DESCRIPTION
    "gridtrain's CUDA learner (cuBLAS, cuDNN)\n"
    " The module gridnode loads when learner.device asks for a GPU. It needs CUDA 13, cuBLAS and cuDNN 9 where\n"
    " NVIDIA's installers put them (/usr/local/cuda).")
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-gridtrain)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS ON)
# The module is built for the Python it was built with (its ABI: cpython-3XY).
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
    "python3 (>= ${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}), python3 (<< ${Python_VERSION_MAJOR}.${GRIDTRAIN_PYTHON_NEXT_MINOR})")
set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS "python3-torch, gridtrain (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_PYTHON_DESCRIPTION
    "gridtrain's PyTorch front end: import gridtrain\n"
    " A gridtrain node inside a PyTorch training process: the same cluster, config, failover, status and metrics\n"
    " as gridnode, averaging your own model (gridtrain.torch.ElasticAverager). python3 -m gridtrain.launch\n"
    " runs a script as several nodes on one machine.")
set(CPACK_COMPONENT_NODE_DESCRIPTION "gridnode")
include(CPack)
